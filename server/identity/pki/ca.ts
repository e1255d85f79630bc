import { createPrivateKey, generateKeyPair, X509Certificate, type KeyObject } from "node:crypto";
import { join } from "node:path";
import { promisify } from "node:util";
import forge from "node-forge";
import { CaFileError, errorMessage } from "./errors.js";
import { ensurePrivateDir, readIfExists, writeFileAtomic } from "../../../common/files.js";
import { fingerprintOfDer } from "../../../common/x509.js";
import {
  issueNodeCertificate,
  prepareNodeCertificate,
  type IssuedNodeCertificate,
  type IssueNodeCertificateOptions,
  type PreparedNodeCertificate,
} from "./node-cert.js";
import { randomSerialHex } from "./serial.js";
import { ensureServerCertificate, type ServerCertificate } from "./server-cert.js";
import type { CaSigner } from "./signer.js";
import { buildSignedCertificatePem, wholeSeconds } from "./x509-build.js";
import { sessionTicketKeys } from "./session-tickets.js";

export { CsrError } from "./errors.js";
export { fingerprintOfPem, nodeIdFromCertificate } from "../../../common/x509.js";
export type { IssuedNodeCertificate, IssueNodeCertificateOptions } from "./node-cert.js";
export { canonicalSerial } from "./serial.js";
export type { ServerCertificate } from "./server-cert.js";

const generateKeyPairAsync = promisify(generateKeyPair);

export interface Ca {
  readonly certPem: string;
  /** `sha256:<hex>` of the CA certificate DER; what agents pin. */
  readonly fingerprint: string;
  readonly x509: X509Certificate;
  ensureServerCertificate(dir: string, names: string[]): Promise<ServerCertificate>;
  /** Rejects with CsrError for an unacceptable request; the signature runs on the thread pool. */
  issueNodeCertificate(csrPem: string, nodeId: string, opts: IssueNodeCertificateOptions): Promise<IssuedNodeCertificate>;
  /** Checks a request and fixes serial and validity; signs only when asked (./node-cert.ts). */
  prepareNodeCertificate(csrPem: string, nodeId: string, opts: IssueNodeCertificateOptions): PreparedNodeCertificate;
  /** The TLS session ticket keys for the epoch holding `nowMs` (./session-tickets.ts). */
  sessionTicketKeys(nowMs: number): Buffer;
}

export interface CaOptions {
  commonName?: string;
  validityDays?: number;
}

const DEFAULT_CA_VALIDITY_DAYS = 3650;

/**
 * Loads the CA from `dir` (ca.crt + ca.key), creating it on first use.
 * Assumes one process owns `dir`; two processes creating a CA at the same moment could
 * leave mismatched files, which the next load reports instead of using.
 */
export async function loadOrCreateCa(dir: string, opts: CaOptions = {}): Promise<Ca> {
  await ensurePrivateDir(dir);
  const certPath = join(dir, "ca.crt");
  const keyPath = join(dir, "ca.key");
  let [certPem, keyPem] = await Promise.all([readIfExists(certPath), readIfExists(keyPath)]);

  if (certPem === undefined && keyPem === undefined) {
    ({ certPem, keyPem } = await createCaFiles(opts));
    // Key first: a crash in between leaves a key without certificate, which is reported below
    // rather than silently replaced (the key might be the only copy of a CA in use).
    await writeFileAtomic(keyPath, keyPem, 0o600);
    await writeFileAtomic(certPath, certPem, 0o644);
  }
  if (certPem === undefined) throw new CaFileError(certPath, `file is missing but ${keyPath} exists`);
  if (keyPem === undefined) throw new CaFileError(keyPath, `file is missing but ${certPath} exists`);
  return caFromPem(certPem, keyPem, certPath, keyPath);
}

async function createCaFiles(opts: CaOptions): Promise<{ certPem: string; keyPem: string }> {
  const validityDays = opts.validityDays ?? DEFAULT_CA_VALIDITY_DAYS;
  if (!Number.isFinite(validityDays) || validityDays <= 0) throw new RangeError(`validityDays must be positive, got ${validityDays}`);
  const { publicKey, privateKey } = await generateKeyPairAsync("rsa", { modulusLength: 2048 });
  const subject = [{ name: "commonName", value: opts.commonName ?? "ModelForge CA" }];
  const now = Date.now();
  const certPem = await buildSignedCertificatePem(
    {
      serialHex: randomSerialHex(),
      subject,
      issuer: subject,
      publicKey,
      notBefore: wholeSeconds(new Date(now - 60_000)),
      notAfter: wholeSeconds(new Date(now + validityDays * 24 * 60 * 60 * 1000)),
      extensions: [
        // pathLen 0: this CA signs leaf certificates only, never other CAs.
        { name: "basicConstraints", cA: true, pathLenConstraint: 0, critical: true },
        { name: "keyUsage", keyCertSign: true, cRLSign: true, critical: true },
        { name: "subjectKeyIdentifier" },
      ],
    },
    privateKey,
  );
  return { certPem, keyPem: privateKey.export({ type: "pkcs8", format: "pem" }).toString() };
}

function caFromPem(certPem: string, keyPem: string, certPath: string, keyPath: string): Ca {
  const x509 = parseOr(certPath, () => new X509Certificate(certPem));
  if (!x509.ca) throw new CaFileError(certPath, "certificate is not a CA certificate");
  const forgeCert = parseOr(certPath, () => forge.pki.certificateFromPem(certPem));
  const key: KeyObject = parseOr(keyPath, () => createPrivateKey(keyPem));
  if (key.asymmetricKeyType !== "rsa") throw new CaFileError(keyPath, `key type ${key.asymmetricKeyType} is not supported, RSA required`);
  if (!x509.checkPrivateKey(key)) throw new CaFileError(keyPath, `key does not belong to the certificate in ${certPath}`);

  const signer: CaSigner = {
    x509,
    key,
    subject: forgeCert.subject.attributes,
    keyIdentifier: subjectKeyIdentifier(forgeCert),
    notAfter: forgeCert.validity.notAfter,
  };
  return {
    certPem,
    fingerprint: fingerprintOfDer(x509.raw),
    x509,
    ensureServerCertificate: (dir, names) => ensureServerCertificate(signer, dir, names),
    issueNodeCertificate: (csrPem, nodeId, issueOpts) => issueNodeCertificate(signer, csrPem, nodeId, issueOpts),
    prepareNodeCertificate: (csrPem, nodeId, issueOpts) => prepareNodeCertificate(signer, csrPem, nodeId, issueOpts),
    sessionTicketKeys: (nowMs) => sessionTicketKeys(key, nowMs),
  };
}

function parseOr<T>(file: string, parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    throw new CaFileError(file, errorMessage(err));
  }
}

/** The CA's own key identifier, or one derived from its key if the certificate lacks it. */
function subjectKeyIdentifier(cert: forge.pki.Certificate): string {
  const ext = cert.getExtension("subjectKeyIdentifier") as { subjectKeyIdentifier?: string } | undefined;
  return ext?.subjectKeyIdentifier ? forge.util.hexToBytes(ext.subjectKeyIdentifier) : cert.generateSubjectKeyIdentifier().getBytes();
}
