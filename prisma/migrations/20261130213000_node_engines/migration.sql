-- AlterTable
ALTER TABLE "Node" ADD COLUMN     "engines" TEXT[] DEFAULT ARRAY[]::TEXT[];

