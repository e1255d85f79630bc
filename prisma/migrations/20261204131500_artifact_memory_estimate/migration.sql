-- AlterTable
ALTER TABLE "StoredArtifact" ADD COLUMN     "estimatedContextLength" INTEGER,
ADD COLUMN     "estimatedKvBytesPerToken" BIGINT,
ADD COLUMN     "estimatedWeightsBytes" BIGINT;

