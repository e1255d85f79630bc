// Telling "the server is down" apart from "the server no longer accepts this node's credential".
// Two failures mean the latter: the control plane's certificate no longer verifies against the CA
// pinned at enrollment (its CA was replaced; TLS ends before any RPC), or the control plane
// refuses the node's certificate (unauthenticated: not from its CA, revoked, unknown). Retrying
// cannot fix either; re-enrolling with a recovery token can. Pure: the caller passes the clock.
import { Code, ConnectError } from "@connectrpc/connect";

/** Node's codes for a server certificate that does not verify against the pinned CA. */
const UNTRUSTED_SERVER = new Set([
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "CERT_SIGNATURE_FAILURE",
]);

export type CredentialRefusal = { kind: "server-untrusted"; reason: string } | { kind: "credential-refused"; reason: string };

/** What a failed session says about the credential, if anything. */
export function credentialRefusalOf(err: unknown): CredentialRefusal | undefined {
  const ce = ConnectError.from(err);
  if (ce.code === Code.Unauthenticated) return { kind: "credential-refused", reason: ce.rawMessage };
  for (let e: unknown = err; e instanceof Error; e = e.cause) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== undefined && UNTRUSTED_SERVER.has(code)) return { kind: "server-untrusted", reason: code };
  }
  return undefined;
}

export interface RefusalPolicy {
  /** Consecutive TLS verification failures before they are taken for a replaced CA. */
  untrustedAfter: number;
  /** The advice is repeated at most this often while the refusals go on. */
  repeatMs: number;
}

export const refusalPolicy: RefusalPolicy = { untrustedAfter: 3, repeatMs: 10 * 60_000 };

/** Counts consecutive refusals and says when to tell the operator. */
export class CredentialRefusals {
  private consecutive = 0;
  private advisedAt: number | undefined;

  constructor(private readonly policy: RefusalPolicy = refusalPolicy) {}

  /** A session failed with `err` at `now`: the refusal to report, when the advice is due. */
  failed(err: unknown, now: number): CredentialRefusal | undefined {
    const refusal = credentialRefusalOf(err);
    if (refusal === undefined) {
      this.consecutive = 0;
      return undefined;
    }
    this.consecutive++;
    // A refused certificate is the server's explicit answer; a failed verification might be a
    // passing misconfiguration, so it has to repeat first.
    if (refusal.kind === "server-untrusted" && this.consecutive < this.policy.untrustedAfter) return undefined;
    if (this.advisedAt !== undefined && now - this.advisedAt < this.policy.repeatMs) return undefined;
    this.advisedAt = now;
    return refusal;
  }

  /** A session was established: the credential works. */
  accepted(): void {
    this.consecutive = 0;
    this.advisedAt = undefined;
  }
}

/** The log line for a refusal: what happened and how to recover, naming this node. */
export function refusalAdvice(refusal: CredentialRefusal, nodeId: string): string {
  const what =
    refusal.kind === "server-untrusted"
      ? `the control plane's certificate no longer verifies against the CA pinned at enrollment (${refusal.reason}): its CA was probably replaced, so it no longer accepts this node's credential`
      : `the control plane no longer accepts this node's credential (${refusal.reason})`;
  return (
    `${what}. Retrying will not help. To recover, an operator runs \`npm run forge -- tokens create --node ${nodeId}\`, ` +
    "then run the join command it prints here with --force (`npm run agent -- enroll --force --server URL --token TOKEN --ca-fingerprint sha256:...`)"
  );
}
