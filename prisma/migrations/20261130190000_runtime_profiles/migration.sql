-- CreateTable
CREATE TABLE "RuntimeProfile" (
    "name" TEXT NOT NULL,
    "engine" TEXT NOT NULL,
    "contextSize" INTEGER NOT NULL,
    "threads" INTEGER NOT NULL,
    "contentHash" TEXT NOT NULL,
    "createdAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "RuntimeProfile_pkey" PRIMARY KEY ("name")
);

