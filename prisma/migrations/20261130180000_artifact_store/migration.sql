-- CreateTable
CREATE TABLE "StoredArtifact" (
    "repository" TEXT NOT NULL,
    "commit" TEXT NOT NULL,
    "path" TEXT NOT NULL,
    "sizeBytes" BIGINT NOT NULL,
    "sha256" TEXT NOT NULL,
    "createdAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "StoredArtifact_pkey" PRIMARY KEY ("repository","commit","path")
);

-- CreateIndex
CREATE INDEX "StoredArtifact_sha256_idx" ON "StoredArtifact"("sha256");

