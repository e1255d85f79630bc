-- CreateTable
CREATE TABLE "ControlPlaneReplica" (
    "id" UUID NOT NULL,
    "url" TEXT NOT NULL,
    "startedAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "seenAt" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "ControlPlaneReplica_pkey" PRIMARY KEY ("id")
);

