import { acceptedCsrPublicKey } from "./csr.js";
import { isUuid, nodeUri } from "../../../common/x509.js";
import { canonicalSerial, randomSerialHex } from "./serial.js";
import { clampToCa, type CaSigner } from "./signer.js";
import { buildSignedCertificatePem, wholeSeconds } from "./x509-build.js";

export interface IssueNodeCertificateOptions {
  validityMs: number;
  now?: Date;
}

export interface IssuedNodeCertificate {
  certPem: string;
  /** Canonical form (see canonicalSerial), equal to what Node reports for the certificate. */
  serial: string;
  notBefore: Date;
  notAfter: Date;
}

// Nodes whose clock runs slightly behind must still accept a freshly issued certificate.
const CLOCK_SKEW_MS = 60_000;

/** A node certificate whose request is checked and whose serial and validity are fixed, not yet signed. */
export interface PreparedNodeCertificate {
  serial: string;
  notBefore: Date;
  notAfter: Date;
  /** The signature (on the thread pool) and the PEM. */
  sign(): Promise<string>;
}

/**
 * Checks the request and fixes everything but the signature, so a caller can record the
 * credential before paying for the private-key operation (enrollment signs only for a caller whose
 * token it has claimed). The identity comes from `nodeId` alone: the CSR only contributes its
 * (verified, strong enough) public key. Throws CsrError for a request the node should fix,
 * TypeError/RangeError for caller bugs.
 */
export function prepareNodeCertificate(
  signer: CaSigner,
  csrPem: string,
  nodeId: string,
  opts: IssueNodeCertificateOptions,
): PreparedNodeCertificate {
  if (!isUuid(nodeId)) throw new TypeError(`node id must be a UUID, got ${JSON.stringify(nodeId)}`);
  if (!Number.isFinite(opts.validityMs) || opts.validityMs <= 0) {
    throw new RangeError(`validityMs must be a positive number, got ${opts.validityMs}`);
  }
  const id = nodeId.toLowerCase();
  const publicKey = acceptedCsrPublicKey(csrPem);

  const now = opts.now ?? new Date();
  const notBefore = wholeSeconds(new Date(now.getTime() - CLOCK_SKEW_MS));
  const notAfter = wholeSeconds(clampToCa(signer, new Date(now.getTime() + opts.validityMs)));
  const serialHex = randomSerialHex();
  const sign = () =>
    buildSignedCertificatePem(
      {
        serialHex,
        subject: [{ name: "commonName", value: `node:${id}` }],
        issuer: signer.subject,
        publicKey,
        notBefore,
        notAfter,
        extensions: [
          { name: "basicConstraints", cA: false, critical: true },
          { name: "keyUsage", digitalSignature: true, keyEncipherment: true, critical: true },
          { name: "extKeyUsage", clientAuth: true },
          { name: "subjectAltName", altNames: [{ type: 6, value: nodeUri(id) }] },
          { name: "subjectKeyIdentifier" },
          { name: "authorityKeyIdentifier", keyIdentifier: signer.keyIdentifier },
        ],
      },
      signer.key,
    );
  return { serial: canonicalSerial(serialHex), notBefore, notAfter, sign };
}

/** Issues a client certificate for a node at once (see prepareNodeCertificate). */
export async function issueNodeCertificate(
  signer: CaSigner,
  csrPem: string,
  nodeId: string,
  opts: IssueNodeCertificateOptions,
): Promise<IssuedNodeCertificate> {
  const prepared = prepareNodeCertificate(signer, csrPem, nodeId, opts);
  return { certPem: await prepared.sign(), serial: prepared.serial, notBefore: prepared.notBefore, notAfter: prepared.notAfter };
}
