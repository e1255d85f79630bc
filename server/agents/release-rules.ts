// What an agent release is and how it is named in the artifact store: pure checks with typed
// errors, shared by the operator RPCs, the download RPC and the rollout rules.
import { Code, ConnectError } from "@connectrpc/connect";
import { parseVersion } from "../agent-version.js";

/** A release's file is at most this big: the signature check reads it whole (Ed25519 is one-shot). */
export const MAX_RELEASE_BYTES = 512 * 1024 * 1024;
/** An Ed25519 signature's length. */
export const SIGNATURE_BYTES = 64;

const platformPattern = /^[a-z0-9]{1,16}-[a-z0-9_]{1,16}$/;

export interface ReleaseName {
  version: string;
  platform: string;
}

/** @throws ConnectError invalid_argument naming the field. */
export function checkReleaseName(name: ReleaseName): void {
  if (name.version.length > 64 || parseVersion(name.version) === undefined) {
    throw new ConnectError(`version: "${name.version.slice(0, 64)}" is not a semantic version (MAJOR.MINOR.PATCH)`, Code.InvalidArgument);
  }
  if (!platformPattern.test(name.platform)) {
    throw new ConnectError(`platform: expected OS-ARCH such as linux-x64, got "${name.platform.slice(0, 64)}"`, Code.InvalidArgument);
  }
}

/** @throws ConnectError invalid_argument when a signature is given without a key, or has the wrong length, failed_precondition when the key wants one. */
export function checkSignaturePresence(signature: Uint8Array, keyConfigured: boolean): void {
  if (!keyConfigured && signature.byteLength > 0) {
    throw new ConnectError(
      "signature: this control plane has no release signing key (MODELFORGE_AGENT_RELEASE_KEY); record the release unsigned",
      Code.InvalidArgument,
    );
  }
  if (keyConfigured && signature.byteLength === 0) {
    throw new ConnectError("signature: releases must be signed (a release signing key is configured)", Code.FailedPrecondition);
  }
  if (keyConfigured && signature.byteLength !== SIGNATURE_BYTES) {
    throw new ConnectError(
      `signature: an Ed25519 signature is ${SIGNATURE_BYTES} bytes, got ${signature.byteLength}`,
      Code.InvalidArgument,
    );
  }
}
