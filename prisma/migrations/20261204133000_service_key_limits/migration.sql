-- AlterTable
ALTER TABLE "ServiceKey" ADD COLUMN     "dailyTokens" BIGINT,
ADD COLUMN     "monthlyTokens" BIGINT,
ADD COLUMN     "rpm" INTEGER,
ADD COLUMN     "tpm" INTEGER;

-- CreateTable
CREATE TABLE "ServiceKeySpend" (
    "keyId" UUID NOT NULL,
    "minuteStart" TIMESTAMPTZ(3) NOT NULL,
    "minuteRequests" INTEGER NOT NULL DEFAULT 0,
    "minuteTokens" BIGINT NOT NULL DEFAULT 0,
    "dayStart" TIMESTAMPTZ(3) NOT NULL,
    "dayTokens" BIGINT NOT NULL DEFAULT 0,
    "monthStart" TIMESTAMPTZ(3) NOT NULL,
    "monthTokens" BIGINT NOT NULL DEFAULT 0,

    CONSTRAINT "ServiceKeySpend_pkey" PRIMARY KEY ("keyId")
);

