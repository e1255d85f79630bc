-- CreateTable
CREATE TABLE "AgentRelease" (
    "version" TEXT NOT NULL,
    "platform" TEXT NOT NULL,
    "sha256" TEXT NOT NULL,
    "sizeBytes" BIGINT NOT NULL,
    "signature" BYTEA,
    "createdAt" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "AgentRelease_pkey" PRIMARY KEY ("version","platform")
);

-- CreateTable
CREATE TABLE "AgentRollout" (
    "id" UUID NOT NULL,
    "version" TEXT NOT NULL,
    "selector" JSONB NOT NULL DEFAULT '{}',
    "batchPercent" INTEGER NOT NULL,
    "pauseBetweenMs" INTEGER NOT NULL,
    "batchDeadlineMs" INTEGER NOT NULL,
    "state" TEXT NOT NULL,
    "pausedReason" TEXT,
    "currentBatch" INTEGER NOT NULL DEFAULT 0,
    "batches" INTEGER NOT NULL,
    "batchStartedAt" TIMESTAMPTZ(3),
    "batchHealthyAt" TIMESTAMPTZ(3),
    "createdAt" TIMESTAMPTZ(3) NOT NULL,
    "updatedAt" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "AgentRollout_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "AgentRolloutNode" (
    "rolloutId" UUID NOT NULL,
    "nodeId" UUID NOT NULL,
    "batch" INTEGER NOT NULL,
    "state" TEXT NOT NULL,
    "fromVersion" TEXT NOT NULL,
    "reason" TEXT,
    "sentAt" TIMESTAMPTZ(3),

    CONSTRAINT "AgentRolloutNode_pkey" PRIMARY KEY ("rolloutId","nodeId")
);

-- CreateIndex
CREATE INDEX "AgentRollout_state_idx" ON "AgentRollout"("state");

-- CreateIndex
CREATE INDEX "AgentRolloutNode_nodeId_idx" ON "AgentRolloutNode"("nodeId");

-- AddForeignKey
ALTER TABLE "AgentRolloutNode" ADD CONSTRAINT "AgentRolloutNode_rolloutId_fkey" FOREIGN KEY ("rolloutId") REFERENCES "AgentRollout"("id") ON DELETE CASCADE ON UPDATE CASCADE;

