-- AlterTable
ALTER TABLE "RuntimeProfile" ADD COLUMN     "memoryBytes" BIGINT NOT NULL DEFAULT 0;

