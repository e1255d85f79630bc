import { createPublicKey, verify, type KeyObject } from "node:crypto";
import forge from "node-forge";
import { CsrError, errorMessage } from "./errors.js";
import { derBytes, fromDerBytes } from "./der.js";

const MAX_CSR_PEM_LENGTH = 64 * 1024;
const MIN_RSA_BITS = 2048;
// Bigger keys are legitimate but slow to verify; nothing sensible needs more.
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
 * Returns only the public key (its SubjectPublicKeyInfo DER): the subject the node asked for is
 * deliberately ignored.
 * forge walks the ASN.1; the key is read and the signature checked by Node's native crypto
 * (forge's big-integer key conversions and JavaScript RSA cost most of an enrollment otherwise).
 */
export function acceptedCsrPublicKey(csrPem: string): Buffer {
  if (typeof csrPem !== "string" || csrPem.length > MAX_CSR_PEM_LENGTH) {
    throw new CsrError("certificate signing request is missing or too large");
  }
  const asn1 = decodeCsrPem(csrPem);
  const keyOid = publicKeyAlgorithmOid(asn1);
  if (keyOid === undefined) throw new CsrError("certificate signing request is malformed: not a PKCS#10 CertificationRequest");
  if (keyOid !== oids.rsaEncryption) {
    throw new CsrError(`certificate signing request key must be RSA (got algorithm ${oidName(keyOid)})`);
  }
  let info: forge.asn1.Asn1;
  let spkiDer: Buffer;
  let key: KeyObject;
  let signatureOid: string;
  let signature: Buffer;
  try {
    info = childAt(asn1, 0);
    const spki = childAt(info, 2);
    spkiDer = derBytes(spki);
    key = rsaPublicKeyOf(spki);
    signatureOid = oidOf(childAt(childAt(asn1, 1), 0));
    signature = bitStringBytes(childAt(asn1, 2));
  } catch (err) {
    throw new CsrError(`certificate signing request is malformed: ${errorMessage(err)}`);
  }
  const { modulusLength: bits = 0, publicExponent: e = 0n } = key.asymmetricKeyDetails ?? {};
  if (bits < MIN_RSA_BITS) throw new CsrError(`certificate signing request RSA key is ${bits} bits; at least ${MIN_RSA_BITS} required`);
  if (bits > MAX_RSA_BITS) throw new CsrError(`certificate signing request RSA key is ${bits} bits; at most ${MAX_RSA_BITS} allowed`);
  if (e < 3n || e >= 2n ** 32n || e % 2n === 0n) {
    throw new CsrError("certificate signing request RSA public exponent is invalid");
  }
  const hash = ACCEPTED_SIGNATURES.get(signatureOid);
  if (hash === undefined) {
    throw new CsrError(`certificate signing request signature algorithm ${signatureOid} is not accepted; use SHA-256 with RSA`);
  }
  let valid: boolean;
  try {
    valid = verify(hash, derBytes(info), key, signature);
  } catch (err) {
    throw new CsrError(`certificate signing request signature cannot be checked: ${errorMessage(err)}`);
  }
  if (!valid) throw new CsrError("certificate signing request signature does not match its public key");
  return spkiDer;
}

/**
 * The key of an rsaEncryption SubjectPublicKeyInfo, read from the RSAPublicKey in its BIT STRING.
 * OpenSSL 3 decodes a SubjectPublicKeyInfo through its generic decoder framework, slowly (the
 * largest single cost of an enrollment in bench/enroll.ts PROFILE=1); the RSAPublicKey alone
 * decodes in a small fraction of that time. The wrapper's rules are checked here instead: exactly the algorithm and
 * the key, and the NULL parameters RFC 3279 requires.
 */
function rsaPublicKeyOf(spki: forge.asn1.Asn1): KeyObject {
  if (!Array.isArray(spki.value) || spki.value.length !== 2) throw new Error("SubjectPublicKeyInfo is not an algorithm and a key");
  const algorithm = childAt(spki, 0);
  if (!Array.isArray(algorithm.value) || algorithm.value.length > 2) throw new Error("unexpected algorithm parameters");
  const parameters = algorithm.value[1];
  if (parameters !== undefined && (parameters.type !== forge.asn1.Type.NULL || parameters.value !== "")) {
    throw new Error("rsaEncryption parameters must be NULL");
  }
  const rsaPublicKey = bitStringBytes(childAt(spki, 1));
  // Strict DER, all bytes consumed: RSAPublicKey ::= SEQUENCE { modulus INTEGER, publicExponent INTEGER }.
  const parsed = fromDerBytes(rsaPublicKey);
  if (!Array.isArray(parsed.value) || parsed.value.length !== 2 || parsed.value.some((n) => n.type !== forge.asn1.Type.INTEGER)) {
    throw new Error("RSAPublicKey is not a modulus and an exponent");
  }
  return createPublicKey({ key: rsaPublicKey, format: "der", type: "pkcs1" });
}

function oidOf(node: forge.asn1.Asn1): string {
  if (node.type !== forge.asn1.Type.OID || typeof node.value !== "string") throw new Error("expected an OID");
  return forge.asn1.derToOid(node.value);
}

/** A BIT STRING's bytes (decoded without looking inside); only whole bytes make a signature. */
function bitStringBytes(node: forge.asn1.Asn1): Buffer {
  if (node.type !== forge.asn1.Type.BITSTRING || typeof node.value !== "string") throw new Error("expected a BIT STRING signature");
  const raw = Buffer.from(node.value, "binary");
  if (raw.length < 2 || raw[0] !== 0) throw new Error("signature BIT STRING has unused bits");
  return raw.subarray(1);
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
    return fromDerBytes(der);
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
