-- AlterTable
ALTER TABLE "JobAttempt" ADD COLUMN     "failure" JSONB;

