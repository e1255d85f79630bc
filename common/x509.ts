import { createHash, X509Certificate } from "node:crypto";

export const NODE_URI_PREFIX = "urn:modelforge:node:";

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function isUuid(value: string): boolean {
  return UUID_RE.test(value);
}

export function nodeUri(nodeId: string): string {
  return `${NODE_URI_PREFIX}${nodeId}`;
}

/**
 * Node id from the URI SAN `urn:modelforge:node:<uuid>` of a certificate as seen by Node
 * (`X509Certificate` or the object from `tlsSocket.getPeerCertificate()`).
 * Does not check who issued the certificate: only trust the answer when the TLS layer
 * has authorized the peer against our CA.
 * Returns undefined when absent, malformed or ambiguous (several different node ids).
 */
export function nodeIdFromCertificate(cert: { subjectaltname?: string } | X509Certificate): string | undefined {
  const san = cert instanceof X509Certificate ? cert.subjectAltName : cert.subjectaltname;
  if (!san) return undefined;
  const ids = new Set<string>();
  // Node joins entries with ", " and quotes any entry that itself contains a separator,
  // so a plain split cannot be fooled into matching half an entry.
  for (const entry of san.split(", ")) {
    if (!entry.startsWith(`URI:${NODE_URI_PREFIX}`)) continue;
    const id = entry.slice(`URI:${NODE_URI_PREFIX}`.length);
    if (!isUuid(id)) return undefined;
    ids.add(id.toLowerCase());
  }
  return ids.size === 1 ? [...ids][0] : undefined;
}

export function fingerprintOfDer(der: Uint8Array): string {
  return `sha256:${createHash("sha256").update(der).digest("hex")}`;
}

/** `sha256:<hex>` of the DER of a PEM certificate (the first one if the PEM holds a chain). */
export function fingerprintOfPem(pem: string): string {
  return fingerprintOfDer(new X509Certificate(pem).raw);
}
