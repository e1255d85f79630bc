-- AlterTable
ALTER TABLE "Deployment" ADD COLUMN     "modelFile" TEXT NOT NULL DEFAULT '';

-- AlterTable
ALTER TABLE "DeploymentInstance" ADD COLUMN     "modelFile" TEXT NOT NULL DEFAULT '';

