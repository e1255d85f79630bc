-- AlterTable
ALTER TABLE "RuntimeProfile" ADD COLUMN     "embeddings" BOOLEAN NOT NULL DEFAULT false;
