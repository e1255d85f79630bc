// Enrollment token secrets: 256 random bits, shown once, stored only as a SHA-256 hash. A hash
// lookup is safe for a secret of this entropy; the final comparison is constant-time anyway.
import { createHash, randomBytes } from "node:crypto";

const prefix = "mfet_";

export function newEnrollmentSecret(): string {
  return prefix + randomBytes(32).toString("base64url");
}

export function hashEnrollmentSecret(secret: string): string {
  return createHash("sha256").update(secret, "utf8").digest("hex");
}

export type TokenState = "active" | "used" | "revoked" | "expired";

export function tokenState(t: { usedAt: Date | null; revokedAt: Date | null; expiresAt: Date }, now: Date): TokenState {
  if (t.usedAt !== null) return "used";
  if (t.revokedAt !== null) return "revoked";
  if (t.expiresAt <= now) return "expired";
  return "active";
}
