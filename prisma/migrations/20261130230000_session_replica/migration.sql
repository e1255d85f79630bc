-- AlterTable
ALTER TABLE "Node" ADD COLUMN     "sessionReplica" TEXT;

