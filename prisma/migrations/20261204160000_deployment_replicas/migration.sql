-- AlterTable
ALTER TABLE "Deployment" ADD COLUMN     "maxPerNode" INTEGER NOT NULL DEFAULT 1,
ADD COLUMN     "replicas" INTEGER NOT NULL DEFAULT 1,
ALTER COLUMN "nodeId" DROP NOT NULL;

-- AlterTable
ALTER TABLE "DeploymentInstance" DROP CONSTRAINT "DeploymentInstance_pkey",
ADD COLUMN     "replica" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "restarts" INTEGER NOT NULL DEFAULT 0,
ALTER COLUMN "nodeId" DROP NOT NULL,
ADD CONSTRAINT "DeploymentInstance_pkey" PRIMARY KEY ("deploymentId", "revision", "replica");

-- AlterTable
ALTER TABLE "DeploymentEvent" ADD COLUMN     "replica" INTEGER NOT NULL DEFAULT 0,
ALTER COLUMN "nodeId" DROP NOT NULL;


-- A deployment placed by its selector was never pinned to the node it landed on: its replicas now
-- record where they are.
UPDATE "Deployment" SET "nodeId" = NULL WHERE "selector" <> '{}'::jsonb;
