// `agent enroll`: pin the server's CA by fingerprint (as kubeadm does), generate the key on this
// node, exchange a CSR and the one-time token for a certificate, and persist the identity.
import { X509Certificate, createPublicKey } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import { fingerprintOfPem, nodeIdFromCertificate } from "../common/x509.js";
import { generateNodeKeyAndCsr } from "./pki/keys.js";
import { readState, writeState, type AgentState } from "./state.js";
import { pinnedClient, unverifiedClient } from "./session/transport.js";
import { agentVersion } from "./version.js";
import { retryAfterDelay } from "./session/timing.js";

export interface EnrollOptions {
  serverUrl: string;
  token: string;
  caFingerprint: string;
  name?: string;
  statePath: string;
  force?: boolean;
  /**
   * How long to keep trying while the server answers "busy, retry in N s" (default 5 minutes): a
   * control plane admits five enrollments at once per address, so a rack behind one NAT enrolling
   * together takes turns.
   */
  busyWaitMs?: number;
  /** Waits that many milliseconds (tests count the waits). */
  sleep?: (ms: number) => Promise<unknown>;
  /** Told of each wait before it begins, with the server's reason: an operator at a terminal sees why nothing happens. */
  onBusy?: (waitMs: number, reason: string) => void;
}

const defaultBusyWaitMs = 5 * 60_000;
/** The most one wait may be, whatever the server says. */
const maxRetryAfterMs = 60_000;

export class EnrollError extends Error {
  override name = "EnrollError";
}

export async function enrollNode(opts: EnrollOptions): Promise<AgentState> {
  const expected = normalizeFingerprint(opts.caFingerprint);
  if (!opts.force && (await readState(opts.statePath)) !== undefined) {
    throw new EnrollError(`an identity already exists at ${opts.statePath}; pass --force to replace it`);
  }
  const info = await unverifiedClient(opts.serverUrl).getServerInfo({});
  const actual = fingerprintOfPem(info.caCertificatePem);
  if (actual !== expected) {
    throw new EnrollError(`server CA fingerprint ${actual} does not match the expected ${expected}: refusing this server`);
  }
  const { keyPem, csrPem } = await generateNodeKeyAndCsr(opts.name);
  // From here on the server must prove it holds a certificate from the pinned CA.
  const client = pinnedClient(opts.serverUrl, info.caCertificatePem);
  const res = await whenAdmitted(() => client.enroll({ token: opts.token, csrPem, nodeName: opts.name ?? "", agentVersion }), opts);
  checkIssued(res.certificatePem, keyPem, info.caCertificatePem, res.nodeId);
  const state: AgentState = {
    version: 1,
    serverUrl: opts.serverUrl,
    nodeId: res.nodeId,
    keyPem,
    certPem: res.certificatePem,
    caPem: info.caCertificatePem,
    caFingerprint: expected,
    sequences: { inventory: "0", telemetry: "0" },
  };
  await writeState(opts.statePath, state);
  return state;
}

/**
 * The call's answer, retried while the server refuses it as busy (resource_exhausted with a
 * Retry-After) and the wait fits in `busyWaitMs`; any other refusal, or one past the budget, is
 * thrown as it came. The token is spent only by the attempt that succeeds.
 */
export async function whenAdmitted<T>(call: () => Promise<T>, opts: Pick<EnrollOptions, "busyWaitMs" | "sleep" | "onBusy">): Promise<T> {
  const deadline = Date.now() + (opts.busyWaitMs ?? defaultBusyWaitMs);
  for (;;) {
    try {
      return await call();
    } catch (err) {
      const busy = err instanceof ConnectError && err.code === Code.ResourceExhausted;
      const waitMs = busy ? retryAfterDelay(err.metadata.get("retry-after"), maxRetryAfterMs) : undefined;
      if (waitMs === undefined || Date.now() + waitMs > deadline) throw err;
      // The server's words, shown on a terminal: control characters out.
      opts.onBusy?.(waitMs, (err as ConnectError).rawMessage.replace(/[\u0000-\u001f\u007f-\u009f]/g, "?"));
      await (opts.sleep ?? sleep)(waitMs);
    }
  }
}

/** The certificate must be for our key, from the pinned CA, and name the node id we were given. */
export function checkIssued(certPem: string, keyPem: string, caPem: string, nodeId: string): void {
  const cert = new X509Certificate(certPem);
  if (!cert.verify(new X509Certificate(caPem).publicKey)) throw new EnrollError("issued certificate is not signed by the pinned CA");
  const ours = createPublicKey(keyPem).export({ type: "spki", format: "der" });
  if (!cert.publicKey.export({ type: "spki", format: "der" }).equals(ours)) {
    throw new EnrollError("issued certificate is not for this node's key");
  }
  if (nodeIdFromCertificate(cert) !== nodeId) throw new EnrollError("issued certificate names another node");
}

export function normalizeFingerprint(text: string): string {
  const hex = text
    .trim()
    .toLowerCase()
    .replace(/^sha256:/, "")
    .replace(/:/g, "");
  if (!/^[0-9a-f]{64}$/.test(hex)) throw new EnrollError("--ca-fingerprint must be sha256:<64 hex digits>");
  return `sha256:${hex}`;
}
