-- AlterTable
ALTER TABLE "ServiceKey" ADD COLUMN     "lastUsedAt" TIMESTAMPTZ(3);

