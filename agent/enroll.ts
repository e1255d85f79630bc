// `agent enroll`: pin the server's CA by fingerprint (as kubeadm does), generate the key on this
// node, exchange a CSR and the one-time token for a certificate, and persist the identity.
import { X509Certificate, createPublicKey } from "node:crypto";
import { fingerprintOfPem, nodeIdFromCertificate } from "../common/x509.js";
import { generateNodeKeyAndCsr } from "./pki/keys.js";
import { readState, writeState, type AgentState } from "./state.js";
import { pinnedClient, unverifiedClient } from "./session/transport.js";
import { agentVersion } from "./version.js";

export interface EnrollOptions {
  serverUrl: string;
  token: string;
  caFingerprint: string;
  name?: string;
  statePath: string;
  force?: boolean;
}

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
  const { keyPem, csrPem } = generateNodeKeyAndCsr(opts.name);
  // From here on the server must prove it holds a certificate from the pinned CA.
  const res = await pinnedClient(opts.serverUrl, info.caCertificatePem).enroll({
    token: opts.token,
    csrPem,
    nodeName: opts.name ?? "",
    agentVersion,
  });
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
