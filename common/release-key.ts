// The release signing key, shared by the control plane (verifies a release before recording it)
// and the agent (verifies it again before running it): an Ed25519 public key in PEM.
import { createPublicKey, verify, type KeyObject } from "node:crypto";
import { readFile } from "node:fs/promises";

export class ReleaseKeyError extends Error {
  override name = "ReleaseKeyError";
}

/** Reads the PEM file; refuses anything but an Ed25519 public key. */
export async function loadReleaseKey(path: string): Promise<KeyObject> {
  const pem = await readFile(path, "utf8").catch((err: NodeJS.ErrnoException) => {
    throw new ReleaseKeyError(`release signing key ${path}: ${err.code ?? err.message}`);
  });
  let key: KeyObject;
  try {
    key = createPublicKey(pem);
  } catch {
    throw new ReleaseKeyError(`release signing key ${path}: not a PEM public key`);
  }
  if (key.asymmetricKeyType !== "ed25519") {
    throw new ReleaseKeyError(`release signing key ${path}: an Ed25519 key is needed, got ${key.asymmetricKeyType ?? "unknown"}`);
  }
  return key;
}

/** Whether `signature` is the key's Ed25519 signature of `content`. */
export function signatureValid(key: KeyObject, content: Uint8Array, signature: Uint8Array): boolean {
  return verify(null, content, key, signature);
}
