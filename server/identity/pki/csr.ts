import { createPublicKey, verify } from "node:crypto";
import forge from "node-forge";
import { CsrError, errorMessage } from "./errors.js";

const MAX_CSR_PEM_LENGTH = 64 * 1024;
const MIN_RSA_BITS = 2048;
// Bigger keys are legitimate but make forge's JS verification slow; nothing sensible needs more.
const MAX_RSA_BITS = 8192;
const { oids } = forge.pki;
// SHA-1/MD5 proof-of-possession signatures are forgeable in principle; forge also defaults to SHA-1.
const ACCEPTED_SIGNATURES = new Map([
  [oids.sha256WithRSAEncryption, "sha256"],
  [oids.sha384WithRSAEncryption, "sha384"],
  [oids.sha512WithRSAEncryption, "sha512"],
]);

/**
 * Parses a PEM PKCS#10 request and checks proof of possession and key strength.
 * Returns only the public key: the subject the node asked for is deliberately ignored.
 */
export function acceptedCsrPublicKey(csrPem: string): forge.pki.rsa.PublicKey {
  if (typeof csrPem !== "string" || csrPem.length > MAX_CSR_PEM_LENGTH) {
    throw new CsrError("certificate signing request is missing or too large");
  }
  const asn1 = decodeCsrPem(csrPem);
  const keyOid = publicKeyAlgorithmOid(asn1);
  if (keyOid === undefined) throw new CsrError("certificate signing request is malformed: not a PKCS#10 CertificationRequest");
  if (keyOid !== oids.rsaEncryption) {
    throw new CsrError(`certificate signing request key must be RSA (got algorithm ${oidName(keyOid)})`);
  }

  let csr: forge.pki.CertificateSigningRequest;
  try {
    csr = forge.pki.certificationRequestFromAsn1(asn1);
  } catch (err) {
    throw new CsrError(`certificate signing request is malformed: ${errorMessage(err)}`);
  }
  const key = csr.publicKey as forge.pki.rsa.PublicKey;

  // Check the key before verify(): a huge modulus or exponent would make forge's JS RSA slow.
  const bits = key.n.bitLength();
  if (bits < MIN_RSA_BITS) throw new CsrError(`certificate signing request RSA key is ${bits} bits; at least ${MIN_RSA_BITS} required`);
  if (bits > MAX_RSA_BITS) throw new CsrError(`certificate signing request RSA key is ${bits} bits; at most ${MAX_RSA_BITS} allowed`);
  if (key.e.bitLength() > 32 || !key.e.testBit(0) || key.e.intValue() < 3) {
    throw new CsrError("certificate signing request RSA public exponent is invalid");
  }

  const hash = csr.signatureOid ? ACCEPTED_SIGNATURES.get(csr.signatureOid) : undefined;
  if (hash === undefined) {
    throw new CsrError(`certificate signing request signature algorithm ${csr.signatureOid} is not accepted; use SHA-256 with RSA`);
  }
  let valid: boolean;
  try {
    // Proof of possession, checked by Node's native crypto over the request's own signed bytes:
    // forge's JavaScript RSA takes most of an enrollment's CPU time otherwise.
    const signed = Buffer.from(forge.asn1.toDer(childAt(asn1, 0)).getBytes(), "binary");
    const publicKey = createPublicKey(forge.pki.publicKeyToPem(key));
    valid = verify(hash, signed, publicKey, Buffer.from(csr.signature as string, "binary"));
  } catch (err) {
    throw new CsrError(`certificate signing request signature cannot be checked: ${errorMessage(err)}`);
  }
  if (!valid) throw new CsrError("certificate signing request signature does not match its public key");
  return key;
}

function decodeCsrPem(csrPem: string): forge.asn1.Asn1 {
  let der: string;
  try {
    const blocks = forge.pem.decode(csrPem);
    if (blocks.length !== 1) throw new Error(`expected one PEM block, found ${blocks.length}`);
    const block = blocks[0]!;
    if (block.type !== "CERTIFICATE REQUEST" && block.type !== "NEW CERTIFICATE REQUEST") {
      throw new Error(`PEM block is "${block.type}", not "CERTIFICATE REQUEST"`);
    }
    if (block.procType?.type === "ENCRYPTED") throw new Error("PEM block is encrypted");
    der = block.body;
  } catch (err) {
    throw new CsrError(`certificate signing request is not valid PEM: ${errorMessage(err)}`);
  }
  try {
    return forge.asn1.fromDer(der, true); // strict; forge also insists on consuming every byte;
  } catch (err) {
    throw new CsrError(`certificate signing request is not valid DER: ${errorMessage(err)}`);
  }
}

/** CertificationRequest.certificationRequestInfo.subjectPKInfo.algorithm.algorithm, if the shape allows. */
function publicKeyAlgorithmOid(csr: forge.asn1.Asn1): string | undefined {
  try {
    const info = childAt(csr, 0);
    const spki = childAt(info, 2);
    const algorithm = childAt(spki, 0);
    const oid = childAt(algorithm, 0);
    if (oid.type !== forge.asn1.Type.OID || typeof oid.value !== "string") return undefined;
    return forge.asn1.derToOid(oid.value);
  } catch {
    return undefined;
  }
}

function oidName(oid: string): string {
  const name = oids[oid];
  return name ? `${name} ${oid}` : oid;
}

function childAt(node: forge.asn1.Asn1, index: number): forge.asn1.Asn1 {
  if (!Array.isArray(node.value)) throw new Error("not a constructed value");
  const child = node.value[index];
  if (!child) throw new Error("missing element");
  return child;
}
