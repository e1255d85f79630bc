-- AlterTable
ALTER TABLE "UsageMinute" ADD COLUMN     "cachedPromptTokens" BIGINT NOT NULL DEFAULT 0;
