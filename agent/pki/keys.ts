import { createPublicKey, generateKeyPair } from "node:crypto";
import { hostname } from "node:os";
import { promisify } from "node:util";
import forge from "node-forge";

export interface NodeKeyAndCsr {
  /** PKCS#8 PEM; stays on the node. */
  keyPem: string;
  /** PKCS#10 PEM to send to the control plane. */
  csrPem: string;
}

// X.520 upper bound for commonName.
const MAX_COMMON_NAME = 64;

/**
 * Creates the node's key pair and a CSR for it. The key comes from Node's native generator
 * (forge's JS generator takes seconds), off the event loop: an RSA key takes 30-200 ms, which a
 * running agent renewing its credential must not spend with requests to relay. The CSR is signed
 * once with forge, which is fine. The CSR subject is informational only: the server assigns the
 * node identity.
 */
export async function generateNodeKeyAndCsr(nodeName?: string): Promise<NodeKeyAndCsr> {
  const { privateKey } = await promisify(generateKeyPair)("rsa", { modulusLength: 2048 });
  const keyPem = privateKey.export({ type: "pkcs8", format: "pem" }).toString();
  return { keyPem, csrPem: buildCsrPem(keyPem, nodeName ?? hostname()) };
}

/** CSR for an existing private key (PEM, PKCS#8 or PKCS#1 RSA), signed with SHA-256. */
export function buildCsrPem(privateKeyPem: string, commonName: string): string {
  const publicPem = createPublicKey(privateKeyPem).export({ type: "spki", format: "pem" }).toString();
  const csr = forge.pki.createCertificationRequest();
  csr.publicKey = forge.pki.publicKeyFromPem(publicPem);
  const cn = commonName.trim().slice(0, MAX_COMMON_NAME) || "modelforge-node";
  csr.setSubject([{ name: "commonName", value: cn }]);
  // forge would default to SHA-1, which the server refuses.
  csr.sign(forge.pki.privateKeyFromPem(privateKeyPem) as forge.pki.rsa.PrivateKey, forge.md.sha256.create());
  return forge.pki.certificationRequestToPem(csr);
}
