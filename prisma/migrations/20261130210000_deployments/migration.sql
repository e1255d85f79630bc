-- AlterTable
ALTER TABLE "Deployment" ADD COLUMN     "commit" TEXT NOT NULL DEFAULT '',
ADD COLUMN     "desired" TEXT NOT NULL DEFAULT 'serving',
ADD COLUMN     "drainTimeoutMs" INTEGER NOT NULL DEFAULT 30000,
ADD COLUMN     "invokeTimeoutMs" INTEGER NOT NULL DEFAULT 60000,
ADD COLUMN     "maxInFlight" INTEGER NOT NULL DEFAULT 8,
ADD COLUMN     "repository" TEXT NOT NULL DEFAULT '',
ADD COLUMN     "runtimeProfile" TEXT NOT NULL DEFAULT '',
ADD COLUMN     "selector" JSONB NOT NULL DEFAULT '{}',
ADD COLUMN     "targetRoot" TEXT NOT NULL DEFAULT '';

-- CreateTable
CREATE TABLE "DeploymentInstance" (
    "deploymentId" UUID NOT NULL,
    "revision" BIGINT NOT NULL,
    "nodeId" UUID NOT NULL,
    "runtimeProfile" TEXT NOT NULL,
    "repository" TEXT NOT NULL,
    "commit" TEXT NOT NULL,
    "phase" TEXT NOT NULL,
    "step" TEXT,
    "jobId" UUID,
    "claimedAt" TIMESTAMPTZ(3),
    "runtimeId" TEXT,
    "reason" TEXT,
    "updatedAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "DeploymentInstance_pkey" PRIMARY KEY ("deploymentId","revision")
);

-- CreateTable
CREATE TABLE "DeploymentEvent" (
    "seq" BIGSERIAL NOT NULL,
    "deploymentId" UUID NOT NULL,
    "time" TIMESTAMPTZ(3) NOT NULL,
    "revision" BIGINT NOT NULL,
    "nodeId" UUID NOT NULL,
    "fromPhase" TEXT,
    "toPhase" TEXT NOT NULL,
    "reason" TEXT,

    CONSTRAINT "DeploymentEvent_pkey" PRIMARY KEY ("seq")
);

-- CreateIndex
CREATE INDEX "DeploymentInstance_nodeId_idx" ON "DeploymentInstance"("nodeId");

-- CreateIndex
CREATE INDEX "DeploymentEvent_deploymentId_seq_idx" ON "DeploymentEvent"("deploymentId", "seq");

-- CreateIndex
CREATE UNIQUE INDEX "Deployment_name_key" ON "Deployment"("name");

-- AddForeignKey
ALTER TABLE "DeploymentInstance" ADD CONSTRAINT "DeploymentInstance_deploymentId_fkey" FOREIGN KEY ("deploymentId") REFERENCES "Deployment"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "DeploymentEvent" ADD CONSTRAINT "DeploymentEvent_deploymentId_fkey" FOREIGN KEY ("deploymentId") REFERENCES "Deployment"("id") ON DELETE CASCADE ON UPDATE CASCADE;

