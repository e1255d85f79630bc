-- AlterTable
ALTER TABLE "Deployment" ADD COLUMN     "priority" INTEGER NOT NULL DEFAULT 0;

