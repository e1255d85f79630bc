-- AlterTable
ALTER TABLE "Deployment" ADD COLUMN     "surgeForNodeId" UUID;

