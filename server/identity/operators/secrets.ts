// The secrets of operators' credentials: 256 random bits, shown once, kept only as SHA-256 (safe to
// look up by for secrets of this entropy, as service keys are).
import { createHash, randomBytes } from "node:crypto";

export const personalTokenPrefix = "mfpt_";
/** "mfpt_" and 43 base64url characters. */
export const personalTokenPattern = /^mfpt_[A-Za-z0-9_-]{43}$/;
/** A console session cookie's value: 43 base64url characters. */
export const sessionSecretPattern = /^[A-Za-z0-9_-]{43}$/;

export const newPersonalTokenSecret = (): string => personalTokenPrefix + randomBytes(32).toString("base64url");
export const newSessionSecret = (): string => randomBytes(32).toString("base64url");
export const hashSecret = (secret: string): string => createHash("sha256").update(secret, "utf8").digest("hex");
