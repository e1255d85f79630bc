-- AlterTable
ALTER TABLE "DeploymentInstance" ADD COLUMN     "gpuIndices" INTEGER[] DEFAULT ARRAY[]::INTEGER[],
ADD COLUMN     "gpuUuids" TEXT[] DEFAULT ARRAY[]::TEXT[];
