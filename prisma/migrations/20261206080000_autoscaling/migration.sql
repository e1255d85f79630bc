-- AlterTable
ALTER TABLE "Deployment" ADD COLUMN     "autoscale" BOOLEAN NOT NULL DEFAULT false,
ADD COLUMN     "coldStartTimeoutMs" INTEGER NOT NULL DEFAULT 120000,
ADD COLUMN     "downscaleDelayMs" INTEGER NOT NULL DEFAULT 600000,
ADD COLUMN     "maxReplicas" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "minReplicas" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "scaleToZeroAfterMs" INTEGER NOT NULL DEFAULT 900000,
ADD COLUMN     "targetInFlight" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "upscaleDelayMs" INTEGER NOT NULL DEFAULT 30000;

-- CreateTable
CREATE TABLE "ServingLoad" (
    "replicaId" TEXT NOT NULL,
    "deploymentId" UUID NOT NULL,
    "load" DOUBLE PRECISION NOT NULL,
    "held" INTEGER NOT NULL,
    "lastRequestAt" TIMESTAMPTZ(3),
    "reportedAt" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "ServingLoad_pkey" PRIMARY KEY ("replicaId","deploymentId")
);

-- CreateIndex
CREATE INDEX "ServingLoad_deploymentId_idx" ON "ServingLoad"("deploymentId");

-- AddForeignKey
ALTER TABLE "ServingLoad" ADD CONSTRAINT "ServingLoad_deploymentId_fkey" FOREIGN KEY ("deploymentId") REFERENCES "Deployment"("id") ON DELETE CASCADE ON UPDATE CASCADE;

