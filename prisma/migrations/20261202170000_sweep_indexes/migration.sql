-- CreateIndex
CREATE INDEX "Node_disabledAt_idx" ON "Node"("disabledAt");

-- CreateIndex
CREATE INDEX "Node_decommissionedAt_idx" ON "Node"("decommissionedAt");

-- CreateIndex
CREATE INDEX "NodeCredential_revokedAt_idx" ON "NodeCredential"("revokedAt");

