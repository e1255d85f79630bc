-- CreateTable
CREATE TABLE "UsageMinute" (
    "keyId" UUID NOT NULL,
    "deploymentId" UUID NOT NULL,
    "minute" TIMESTAMPTZ(3) NOT NULL,
    "outcome" TEXT NOT NULL,
    "requests" BIGINT NOT NULL DEFAULT 0,
    "promptTokens" BIGINT NOT NULL DEFAULT 0,
    "completionTokens" BIGINT NOT NULL DEFAULT 0,
    "firstTokenMsSum" BIGINT NOT NULL DEFAULT 0,
    "firstTokenCount" BIGINT NOT NULL DEFAULT 0,

    CONSTRAINT "UsageMinute_pkey" PRIMARY KEY ("keyId","deploymentId","minute","outcome")
);

-- CreateIndex
CREATE INDEX "UsageMinute_deploymentId_minute_idx" ON "UsageMinute"("deploymentId", "minute");

-- CreateIndex
CREATE INDEX "UsageMinute_minute_idx" ON "UsageMinute"("minute");

