-- CreateSchema
CREATE SCHEMA IF NOT EXISTS "public";

-- CreateTable
CREATE TABLE "Node" (
    "id" UUID NOT NULL,
    "name" TEXT NOT NULL,
    "labels" JSONB NOT NULL DEFAULT '{}',
    "createdAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMPTZ(3) NOT NULL,
    "lastHeartbeatAt" TIMESTAMPTZ(3),
    "liveness" TEXT NOT NULL DEFAULT 'pending',
    "livenessChangedAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "disabledAt" TIMESTAMPTZ(3),
    "disabledReason" TEXT,
    "decommissionedAt" TIMESTAMPTZ(3),
    "agentVersion" TEXT,
    "protocolVersion" INTEGER,
    "capabilities" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "host" JSONB,
    "renewalRequestedAt" TIMESTAMPTZ(3),
    "renewalReason" TEXT,

    CONSTRAINT "Node_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "Gpu" (
    "id" UUID NOT NULL,
    "nodeId" UUID NOT NULL,
    "uuid" TEXT NOT NULL,
    "index" INTEGER NOT NULL,
    "pciBusId" TEXT NOT NULL,
    "model" TEXT NOT NULL,
    "memoryTotalBytes" BIGINT NOT NULL,
    "driverVersion" TEXT NOT NULL,
    "vendor" TEXT NOT NULL,
    "state" TEXT NOT NULL DEFAULT 'present',
    "firstSeenAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "lastSeenAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "missingSince" TIMESTAMPTZ(3),

    CONSTRAINT "Gpu_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "NodeCredential" (
    "serial" TEXT NOT NULL,
    "nodeId" UUID NOT NULL,
    "issuedAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expiresAt" TIMESTAMPTZ(3) NOT NULL,
    "revokedAt" TIMESTAMPTZ(3),
    "revokedReason" TEXT,

    CONSTRAINT "NodeCredential_pkey" PRIMARY KEY ("serial")
);

-- CreateTable
CREATE TABLE "EnrollmentToken" (
    "id" UUID NOT NULL,
    "tokenHash" TEXT NOT NULL,
    "nodeName" TEXT,
    "nodeId" UUID,
    "labels" JSONB NOT NULL DEFAULT '{}',
    "createdAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expiresAt" TIMESTAMPTZ(3) NOT NULL,
    "usedAt" TIMESTAMPTZ(3),
    "usedByNodeId" UUID,
    "revokedAt" TIMESTAMPTZ(3),

    CONSTRAINT "EnrollmentToken_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "StreamCursor" (
    "nodeId" UUID NOT NULL,
    "stream" TEXT NOT NULL,
    "sequence" BIGINT NOT NULL,
    "appliedSequence" BIGINT NOT NULL DEFAULT 0,
    "appliedObservedAt" TIMESTAMPTZ(3),
    "receivedAt" TIMESTAMPTZ(3) NOT NULL,
    "rejectionReason" TEXT,

    CONSTRAINT "StreamCursor_pkey" PRIMARY KEY ("nodeId","stream")
);

-- CreateTable
CREATE TABLE "NodeTelemetry" (
    "nodeId" UUID NOT NULL,
    "sequence" BIGINT NOT NULL,
    "observedAt" TIMESTAMPTZ(3) NOT NULL,
    "receivedAt" TIMESTAMPTZ(3) NOT NULL,
    "data" JSONB NOT NULL,

    CONSTRAINT "NodeTelemetry_pkey" PRIMARY KEY ("nodeId")
);

-- CreateTable
CREATE TABLE "Job" (
    "id" UUID NOT NULL,
    "seq" BIGSERIAL NOT NULL,
    "nodeId" UUID NOT NULL,
    "capability" TEXT NOT NULL,
    "spec" JSONB NOT NULL,
    "state" TEXT NOT NULL DEFAULT 'pending',
    "orderingKey" TEXT,
    "attempt" INTEGER NOT NULL DEFAULT 0,
    "maxAttempts" INTEGER NOT NULL DEFAULT 5,
    "leaseExpiresAt" TIMESTAMPTZ(3),
    "progress" JSONB,
    "result" JSONB,
    "failure" JSONB,
    "cancelRequested" BOOLEAN NOT NULL DEFAULT false,
    "cancelReason" TEXT,
    "createdAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMPTZ(3) NOT NULL,
    "finishedAt" TIMESTAMPTZ(3),

    CONSTRAINT "Job_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "JobAttempt" (
    "jobId" UUID NOT NULL,
    "attempt" INTEGER NOT NULL,
    "leasedAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expiresAt" TIMESTAMPTZ(3) NOT NULL,
    "endedAt" TIMESTAMPTZ(3),
    "outcome" TEXT,

    CONSTRAINT "JobAttempt_pkey" PRIMARY KEY ("jobId","attempt")
);

-- CreateTable
CREATE TABLE "Deployment" (
    "id" UUID NOT NULL,
    "name" TEXT NOT NULL,
    "nodeId" UUID NOT NULL,
    "state" TEXT NOT NULL DEFAULT 'loading',
    "revision" BIGINT NOT NULL DEFAULT 1,
    "failureReason" TEXT,
    "createdAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "Deployment_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "AuditEvent" (
    "id" UUID NOT NULL,
    "seq" BIGSERIAL NOT NULL,
    "time" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "actor" TEXT NOT NULL,
    "action" TEXT NOT NULL,
    "targetType" TEXT NOT NULL,
    "targetId" TEXT NOT NULL,
    "correlationId" TEXT,
    "details" JSONB NOT NULL DEFAULT '{}',

    CONSTRAINT "AuditEvent_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "Gpu_nodeId_uuid_key" ON "Gpu"("nodeId", "uuid");

-- CreateIndex
CREATE INDEX "NodeCredential_nodeId_idx" ON "NodeCredential"("nodeId");

-- CreateIndex
CREATE UNIQUE INDEX "EnrollmentToken_tokenHash_key" ON "EnrollmentToken"("tokenHash");

-- CreateIndex
CREATE INDEX "Job_nodeId_state_idx" ON "Job"("nodeId", "state");

-- CreateIndex
CREATE INDEX "Job_orderingKey_seq_idx" ON "Job"("orderingKey", "seq");

-- CreateIndex
CREATE INDEX "Job_state_leaseExpiresAt_idx" ON "Job"("state", "leaseExpiresAt");

-- CreateIndex
CREATE UNIQUE INDEX "Job_seq_key" ON "Job"("seq");

-- CreateIndex
CREATE INDEX "Deployment_nodeId_idx" ON "Deployment"("nodeId");

-- CreateIndex
CREATE UNIQUE INDEX "AuditEvent_seq_key" ON "AuditEvent"("seq");

-- CreateIndex
CREATE INDEX "AuditEvent_targetId_seq_idx" ON "AuditEvent"("targetId", "seq");

-- CreateIndex
CREATE INDEX "AuditEvent_action_seq_idx" ON "AuditEvent"("action", "seq");

-- AddForeignKey
ALTER TABLE "Gpu" ADD CONSTRAINT "Gpu_nodeId_fkey" FOREIGN KEY ("nodeId") REFERENCES "Node"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "NodeCredential" ADD CONSTRAINT "NodeCredential_nodeId_fkey" FOREIGN KEY ("nodeId") REFERENCES "Node"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "StreamCursor" ADD CONSTRAINT "StreamCursor_nodeId_fkey" FOREIGN KEY ("nodeId") REFERENCES "Node"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "NodeTelemetry" ADD CONSTRAINT "NodeTelemetry_nodeId_fkey" FOREIGN KEY ("nodeId") REFERENCES "Node"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "Job" ADD CONSTRAINT "Job_nodeId_fkey" FOREIGN KEY ("nodeId") REFERENCES "Node"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "JobAttempt" ADD CONSTRAINT "JobAttempt_jobId_fkey" FOREIGN KEY ("jobId") REFERENCES "Job"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "Deployment" ADD CONSTRAINT "Deployment_nodeId_fkey" FOREIGN KEY ("nodeId") REFERENCES "Node"("id") ON DELETE CASCADE ON UPDATE CASCADE;

