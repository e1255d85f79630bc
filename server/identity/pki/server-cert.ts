import { createPrivateKey, generateKeyPair, X509Certificate } from "node:crypto";
import { join } from "node:path";
import { promisify } from "node:util";
import { ensurePrivateDir, readIfExists, writeFileAtomic } from "../../../common/files.js";
import { randomSerialHex } from "./serial.js";
import { normalizeServerNames } from "./server-names.js";
import { clampToCa, type CaSigner } from "./signer.js";
import { buildSignedCertificatePem, wholeSeconds } from "./x509-build.js";

const generateKeyPairAsync = promisify(generateKeyPair);

const DAY_MS = 24 * 60 * 60 * 1000;
const SERVER_VALIDITY_MS = 365 * DAY_MS;
const RENEW_BEFORE_MS = 7 * DAY_MS;

export interface ServerCertificate {
  certPem: string;
  keyPem: string;
}

/**
 * Returns the TLS server certificate in `dir`, reissuing it when it does not cover exactly
 * `names`, was not issued by this CA, does not match its key, or is close to expiry.
 */
export async function ensureServerCertificate(
  signer: CaSigner,
  dir: string,
  names: readonly string[],
  now: Date = new Date(),
): Promise<ServerCertificate> {
  const wanted = normalizeServerNames(names);
  await ensurePrivateDir(dir);
  const certPath = join(dir, "server.crt");
  const keyPath = join(dir, "server.key");

  const [certPem, keyPem] = await Promise.all([readIfExists(certPath), readIfExists(keyPath)]);
  if (certPem !== undefined && keyPem !== undefined && isReusable(signer, certPem, keyPem, wanted.keys, now)) {
    return { certPem, keyPem };
  }

  // An EC (P-256) key: the server signs once per TLS handshake, and ECDSA costs a fraction of an
  // RSA-2048 signature, which a storm of reconnecting agents multiplies. The CA stays RSA.
  const { publicKey, privateKey } = await generateKeyPairAsync("ec", { namedCurve: "prime256v1" });
  const fresh: ServerCertificate = {
    keyPem: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
    certPem: await buildSignedCertificatePem(
      {
        serialHex: randomSerialHex(),
        subject: [{ name: "commonName", value: "ModelForge server" }],
        issuer: signer.subject,
        publicKey,
        notBefore: wholeSeconds(new Date(now.getTime() - 60_000)),
        notAfter: wholeSeconds(clampToCa(signer, new Date(now.getTime() + SERVER_VALIDITY_MS))),
        extensions: [
          { name: "basicConstraints", cA: false, critical: true },
          { name: "keyUsage", digitalSignature: true, keyEncipherment: true, critical: true },
          { name: "extKeyUsage", serverAuth: true },
          { name: "subjectAltName", altNames: wanted.altNames },
          { name: "subjectKeyIdentifier" },
          { name: "authorityKeyIdentifier", keyIdentifier: signer.keyIdentifier },
        ],
      },
      signer.key,
    ),
  };
  // Key first: if we stop in between, the old certificate no longer matches the key and the
  // next start reissues instead of serving a mismatched pair.
  await writeFileAtomic(keyPath, fresh.keyPem, 0o600);
  await writeFileAtomic(certPath, fresh.certPem, 0o644);
  return fresh;
}

function isReusable(signer: CaSigner, certPem: string, keyPem: string, wantedKeys: Set<string>, now: Date): boolean {
  try {
    const x509 = new X509Certificate(certPem);
    if (!x509.checkIssued(signer.x509) || !x509.verify(signer.x509.publicKey)) return false;
    const key = createPrivateKey(keyPem);
    if (key.asymmetricKeyType !== "ec" || !x509.checkPrivateKey(key)) return false; // an RSA one from an older version is replaced
    if (new Date(x509.validTo).getTime() - now.getTime() < RENEW_BEFORE_MS) return false;
    return sameKeys(sanKeys(x509), wantedKeys);
  } catch {
    // Unreadable files are simply replaced: the server certificate carries no state worth keeping.
    return false;
  }
}

/** The certificate's names, as Node reads them (forge cannot read a certificate with an EC key). */
function sanKeys(x509: X509Certificate): Set<string> {
  const names = (x509.subjectAltName ?? "")
    .split(", ")
    .map((entry) => /^(?:DNS|IP Address):(.+)$/.exec(entry)?.[1])
    .filter((name): name is string => name !== undefined);
  return normalizeServerNames(names).keys;
}

function sameKeys(a: Set<string>, b: Set<string>): boolean {
  return a.size === b.size && [...a].every((k) => b.has(k));
}
