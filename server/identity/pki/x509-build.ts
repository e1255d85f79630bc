import { createHash, sign, type KeyObject } from "node:crypto";
import { promisify } from "node:util";
import forge from "node-forge";
import { derBytes, fromDerBytes } from "./der.js";

// The RSA private-key operation runs on libuv's thread pool, off the event loop: it is most of an
// enrollment's CPU time, and a storm of enrollments would otherwise hold up every other call.
const signOffLoop = promisify(sign);

const { asn1 } = forge;
// Present at runtime but missing from @types/node-forge.
const { certificateExtensionsToAsn1 } = forge.pki as unknown as { certificateExtensionsToAsn1(extensions: object[]): forge.asn1.Asn1 };
const SHA256_WITH_RSA = forge.pki.oids.sha256WithRSAEncryption!;
const SUBJECT_KEY_IDENTIFIER = forge.pki.oids.subjectKeyIdentifier!;
const JAN_1_1950 = Date.UTC(1950, 0, 1);
const JAN_1_2050 = Date.UTC(2050, 0, 1);

export interface CertificateSpec {
  serialHex: string;
  subject: forge.pki.CertificateField[];
  issuer: forge.pki.CertificateField[];
  /** The subject's public key as SubjectPublicKeyInfo DER (a CSR's, verified), or as Node holds it. */
  publicKey: Buffer | KeyObject;
  notBefore: Date;
  notAfter: Date;
  /** forge extension descriptions; `{ name: "subjectKeyIdentifier" }` is filled from publicKey. */
  extensions: object[];
}

/** X.509 validity is encoded with whole seconds; truncating up front keeps the reported dates exact. */
export function wholeSeconds(date: Date): Date {
  return new Date(Math.floor(date.getTime() / 1000) * 1000);
}

/**
 * Lays out the TBSCertificate with node-forge's ASN.1 and extension encoders, and leaves what is
 * costly in JavaScript to Node's native crypto: the key's encoding and identifier (forge would
 * convert its big integers back and forth) and the signature. PEM with LF line endings.
 */
export async function buildSignedCertificatePem(spec: CertificateSpec, issuerKey: KeyObject): Promise<string> {
  // forge fills extension values and names' attribute types only through a certificate object.
  const fields = forge.pki.createCertificate();
  fields.setSubject(spec.subject);
  fields.setIssuer(spec.issuer);
  // Encoding a key is slow in OpenSSL 3 (bench/enroll-issuance.ts): a CSR's own SubjectPublicKeyInfo bytes are used as they are.
  const spki = Buffer.isBuffer(spec.publicKey) ? spec.publicKey : spec.publicKey.export({ type: "spki", format: "der" });
  fields.setExtensions(spec.extensions.map((e) => (isSubjectKeyIdentifier(e) ? subjectKeyIdentifier(spki) : e)));

  const tbs = asn1.create(asn1.Class.UNIVERSAL, asn1.Type.SEQUENCE, true, [
    asn1.create(asn1.Class.CONTEXT_SPECIFIC, 0, true, [
      asn1.create(asn1.Class.UNIVERSAL, asn1.Type.INTEGER, false, asn1.integerToDer(2).getBytes()), // v3
    ]),
    asn1.create(asn1.Class.UNIVERSAL, asn1.Type.INTEGER, false, forge.util.hexToBytes(spec.serialHex)),
    signatureAlgorithm(),
    forge.pki.distinguishedNameToAsn1(fields.issuer),
    asn1.create(asn1.Class.UNIVERSAL, asn1.Type.SEQUENCE, true, [timeOf(spec.notBefore), timeOf(spec.notAfter)]),
    forge.pki.distinguishedNameToAsn1(fields.subject),
    fromDerBytes(spki),
    ...(fields.extensions.length > 0 ? [certificateExtensionsToAsn1(fields.extensions)] : []),
  ]);
  const tbsDer = derBytes(tbs);
  const signature = await signOffLoop("sha256", tbsDer, issuerKey);
  const algorithmDer = derBytes(signatureAlgorithm());
  // Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue BIT STRING }
  const der = derTlv(0x30, Buffer.concat([tbsDer, algorithmDer, derTlv(0x03, Buffer.concat([Buffer.of(0), signature]))]));
  const lines = der.toString("base64").match(/.{1,64}/g) ?? [];
  return `-----BEGIN CERTIFICATE-----\n${lines.join("\n")}\n-----END CERTIFICATE-----\n`;
}

function isSubjectKeyIdentifier(e: object): boolean {
  return (e as { name?: string }).name === "subjectKeyIdentifier";
}

/** RFC 5280 4.2.1.2 method 1: the SHA-1 of the subjectPublicKey bits, whatever the key type. */
function subjectKeyIdentifier(spkiDer: Buffer): object {
  const spki = fromDerBytes(spkiDer);
  const bits = (spki.value as forge.asn1.Asn1[])[1]!.value as string; // leading unused-bits byte, then the key
  const digest = createHash("sha1").update(Buffer.from(bits, "binary").subarray(1)).digest();
  return {
    name: "subjectKeyIdentifier",
    id: SUBJECT_KEY_IDENTIFIER,
    value: asn1.create(asn1.Class.UNIVERSAL, asn1.Type.OCTETSTRING, false, digest.toString("binary")),
  };
}

function signatureAlgorithm(): forge.asn1.Asn1 {
  return asn1.create(asn1.Class.UNIVERSAL, asn1.Type.SEQUENCE, true, [
    asn1.create(asn1.Class.UNIVERSAL, asn1.Type.OID, false, asn1.oidToDer(SHA256_WITH_RSA).getBytes()),
    asn1.create(asn1.Class.UNIVERSAL, asn1.Type.NULL, false, ""),
  ]);
}

/** UTCTime through 2049, GeneralizedTime from 2050 (RFC 5280 4.1.2.5). */
function timeOf(date: Date): forge.asn1.Asn1 {
  const t = date.getTime();
  return t >= JAN_1_1950 && t < JAN_1_2050
    ? asn1.create(asn1.Class.UNIVERSAL, asn1.Type.UTCTIME, false, asn1.dateToUtcTime(date))
    : asn1.create(asn1.Class.UNIVERSAL, asn1.Type.GENERALIZEDTIME, false, asn1.dateToGeneralizedTime(date));
}

/** One DER tag-length-value with a definite length. */
function derTlv(tag: number, content: Buffer): Buffer {
  const n = content.length;
  const length =
    n < 0x80
      ? Buffer.of(n)
      : n < 0x100
        ? Buffer.of(0x81, n)
        : n < 0x10000
          ? Buffer.of(0x82, n >> 8, n & 0xff)
          : Buffer.of(0x83, n >> 16, (n >> 8) & 0xff, n & 0xff);
  return Buffer.concat([Buffer.of(tag), length, content]);
}
