import { createPrivateKey, createPublicKey, generateKeyPairSync, randomUUID, sign, X509Certificate } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import tls from "node:tls";
import forge from "node-forge";
import { afterAll, describe, expect, it } from "vitest";
import { buildCsrPem, generateNodeKeyAndCsr } from "../../agent/pki/keys.js";
import { validityReader } from "../../agent/pki/validity.js";
import {
  canonicalSerial,
  CsrError,
  fingerprintOfPem,
  loadOrCreateCa,
  nodeIdFromCertificate,
  type Ca,
} from "../../server/identity/pki/ca.js";

const DAY = 24 * 60 * 60 * 1000;
const SLOW = 30_000;

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function freshDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "modelforge-pki-"));
  dirs.push(dir);
  return dir;
}

function rsaKeyPem(bits: number): string {
  const { privateKey } = generateKeyPairSync("rsa", { modulusLength: bits });
  return privateKey.export({ type: "pkcs8", format: "pem" }).toString();
}

function derOfPem(pem: string): Buffer {
  return Buffer.from(forge.pem.decode(pem)[0]!.body, "binary");
}

function pemOf(type: string, der: Buffer): string {
  return forge.pem.encode({ type, body: der.toString("binary") });
}

/** forge cannot build a non-RSA CSR, so assemble a P-256 one by hand and sign it natively. */
function ecCsrPem(): string {
  const { asn1 } = forge;
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const spki = asn1.fromDer(publicKey.export({ type: "spki", format: "der" }).toString("binary"));
  const info = asn1.create(asn1.Class.UNIVERSAL, asn1.Type.SEQUENCE, true, [
    asn1.create(asn1.Class.UNIVERSAL, asn1.Type.INTEGER, false, "\x00"),
    forge.pki.distinguishedNameToAsn1({ attributes: [{ type: forge.pki.oids.commonName!, value: "ec" }] }),
    spki,
    asn1.create(asn1.Class.CONTEXT_SPECIFIC, 0, true, []),
  ]);
  const infoDer = Buffer.from(asn1.toDer(info).getBytes(), "binary");
  const signature = sign("sha256", infoDer, privateKey);
  const csr = asn1.create(asn1.Class.UNIVERSAL, asn1.Type.SEQUENCE, true, [
    info,
    asn1.create(asn1.Class.UNIVERSAL, asn1.Type.SEQUENCE, true, [
      asn1.create(asn1.Class.UNIVERSAL, asn1.Type.OID, false, asn1.oidToDer("1.2.840.10045.4.3.2").getBytes()),
    ]),
    asn1.create(asn1.Class.UNIVERSAL, asn1.Type.BITSTRING, false, `\x00${signature.toString("binary")}`),
  ]);
  return pemOf("CERTIFICATE REQUEST", Buffer.from(asn1.toDer(csr).getBytes(), "binary"));
}

/** Cuts a chunk out of the middle of the base64 body, leaving well-formed PEM armour. */
function corruptBase64(pem: string): string {
  const lines = pem.trim().split(/\r?\n/);
  lines.splice(3, 1);
  return `${lines.join("\n")}\n`;
}

function issue(ca: Ca, csrPem: string, nodeId: string = randomUUID()) {
  return ca.issueNodeCertificate(csrPem, nodeId, { validityMs: DAY });
}

interface ServerView {
  authorized: boolean;
  authorizationError: string | undefined;
  nodeId: string | undefined;
  serial: string | undefined;
}

/** One mutual-TLS handshake on loopback; reports what the server saw of the client. */
async function handshake(
  ca: Ca,
  server: { certPem: string; keyPem: string },
  client: { certPem: string; keyPem: string },
): Promise<ServerView> {
  const srv = tls.createServer({
    cert: server.certPem,
    key: server.keyPem,
    ca: [ca.certPem],
    requestCert: true,
    // Let unauthorized clients finish the handshake so the test can look at the verdict.
    rejectUnauthorized: false,
  });
  const seen = new Promise<ServerView>((resolve) => {
    srv.once("secureConnection", (socket: tls.TLSSocket) => {
      const peer = socket.getPeerCertificate();
      resolve({
        authorized: socket.authorized,
        authorizationError: socket.authorizationError?.toString(),
        nodeId: nodeIdFromCertificate(peer),
        serial: peer.serialNumber,
      });
      socket.end();
    });
  });
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  const { port } = srv.address() as AddressInfo;
  const socket = tls.connect({ host: "127.0.0.1", port, ca: [ca.certPem], cert: client.certPem, key: client.keyPem });
  socket.on("error", () => undefined); // the server may close first; the verdict is what matters
  try {
    await new Promise<void>((resolve, reject) => {
      socket.once("secureConnect", resolve);
      socket.once("error", reject);
    });
    return await seen;
  } finally {
    socket.destroy();
    await new Promise((resolve) => srv.close(resolve));
  }
}

describe("certificate authority storage", () => {
  it("creates the CA with a private key file and reuses it", async () => {
    const dir = join(freshDir(), "pki");
    const ca = await loadOrCreateCa(dir, { commonName: "Test CA" });

    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir, "ca.key")).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(dir, "ca.crt"), "utf8")).toBe(ca.certPem);
    expect(ca.fingerprint).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(fingerprintOfPem(ca.certPem)).toBe(ca.fingerprint);
    expect(ca.x509.ca).toBe(true);
    expect(ca.x509.subject).toBe("CN=Test CA");
    expect(ca.x509.verify(ca.x509.publicKey)).toBe(true);

    const again = await loadOrCreateCa(dir);
    expect(again.fingerprint).toBe(ca.fingerprint);
    expect(again.certPem).toBe(ca.certPem);
  });

  it("reports a damaged ca.crt in one line naming the file", async () => {
    const dir = freshDir();
    await loadOrCreateCa(dir);
    writeFileSync(join(dir, "ca.crt"), "-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n");

    const err = await loadOrCreateCa(dir).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err).toBeInstanceOf(Error);
    expect(err!.message).toContain(`certificate authority in ${join(dir, "ca.crt")} is damaged: `);
    expect(err!.message).not.toContain("\n");
  });

  it("refuses a ca.key that does not belong to ca.crt", async () => {
    const dir = freshDir();
    await loadOrCreateCa(dir);
    writeFileSync(join(dir, "ca.key"), rsaKeyPem(2048));
    await expect(loadOrCreateCa(dir)).rejects.toThrow(`certificate authority in ${join(dir, "ca.key")} is damaged`);
  });
});

describe("node certificates", () => {
  it("issues a client certificate that Node verifies against the CA", async () => {
    const ca = await loadOrCreateCa(freshDir());
    const { keyPem, csrPem } = await generateNodeKeyAndCsr("gpu-box-1");
    expect(keyPem).toContain("-----BEGIN PRIVATE KEY-----");
    const nodeId = randomUUID();
    const now = new Date("2030-01-02T03:04:05.678Z");

    const issued = await ca.issueNodeCertificate(csrPem, nodeId, { validityMs: 30 * DAY, now });
    const cert = new X509Certificate(issued.certPem);

    expect(cert.verify(ca.x509.publicKey)).toBe(true);
    expect(cert.checkIssued(ca.x509)).toBe(true);
    expect(cert.checkPrivateKey(createPrivateKey(keyPem))).toBe(true);
    expect(cert.ca).toBe(false);
    expect(cert.subject).toBe(`CN=node:${nodeId}`); // the CSR asked for CN=gpu-box-1
    expect(cert.subjectAltName).toBe(`URI:urn:modelforge:node:${nodeId}`);
    expect(cert.keyUsage).toEqual(["1.3.6.1.5.5.7.3.2"]); // clientAuth only
    expect(nodeIdFromCertificate(cert)).toBe(nodeId);
    expect(issued.serial).toBe(cert.serialNumber);
    expect(canonicalSerial(issued.serial)).toBe(canonicalSerial(cert.serialNumber));
    expect(issued.notBefore.toISOString()).toBe("2030-01-02T03:03:05.000Z");
    expect(issued.notAfter.getTime()).toBe(new Date(cert.validTo).getTime());
    expect(issued.notBefore.getTime()).toBe(new Date(cert.validFrom).getTime());
    expect(issued.notAfter.toISOString()).toBe("2030-02-01T03:04:05.000Z");
  });

  it("reports every serial exactly as Node does, including leading zero nibbles", async () => {
    const ca = await loadOrCreateCa(freshDir());
    const { csrPem } = await generateNodeKeyAndCsr();
    const serials = new Set<string>();
    for (let i = 0; i < 64; i++) {
      const issued = await issue(ca, csrPem);
      expect(issued.serial).toBe(new X509Certificate(issued.certPem).serialNumber);
      expect(issued.serial).toMatch(/^[0-7][0-9A-F]{31}$/);
      serials.add(issued.serial);
    }
    expect(serials.size).toBe(64);
  });

  it("rejects a CSR whose signed content was altered", async () => {
    const ca = await loadOrCreateCa(freshDir());
    const { csrPem } = await generateNodeKeyAndCsr("tamper-me");
    const der = derOfPem(csrPem);
    const at = der.indexOf("tamper-me");
    expect(at).toBeGreaterThan(0);
    der[at] = "T".charCodeAt(0);

    await expect(issue(ca, pemOf("CERTIFICATE REQUEST", der))).rejects.toThrow(CsrError);
    await expect(issue(ca, pemOf("CERTIFICATE REQUEST", der))).rejects.toThrow(/signature/);
  });

  it("rejects a CSR signed by a key other than the one it carries", async () => {
    const ca = await loadOrCreateCa(freshDir());
    const claimed = forge.pki.privateKeyFromPem(rsaKeyPem(2048)) as forge.pki.rsa.PrivateKey;
    const signer = forge.pki.privateKeyFromPem(rsaKeyPem(2048)) as forge.pki.rsa.PrivateKey;
    const csr = forge.pki.createCertificationRequest();
    csr.publicKey = forge.pki.setRsaPublicKey(claimed.n, claimed.e);
    csr.setSubject([{ name: "commonName", value: "impostor" }]);
    csr.sign(signer, forge.md.sha256.create());

    await expect(issue(ca, forge.pki.certificationRequestToPem(csr))).rejects.toThrow(CsrError);
  });

  it(
    "rejects weak keys, non-RSA keys and SHA-1 signatures",
    async () => {
      const ca = await loadOrCreateCa(freshDir());
      await expect(issue(ca, buildCsrPem(rsaKeyPem(1024), "small"))).rejects.toThrow(/1024 bits/);
      await expect(issue(ca, buildCsrPem(rsaKeyPem(1024), "small"))).rejects.toThrow(CsrError);
      await expect(issue(ca, ecCsrPem())).rejects.toThrow(CsrError);
      await expect(issue(ca, ecCsrPem())).rejects.toThrow(/must be RSA/);

      const keyPem = rsaKeyPem(2048);
      const csr = forge.pki.createCertificationRequest();
      const key = forge.pki.privateKeyFromPem(keyPem) as forge.pki.rsa.PrivateKey;
      csr.publicKey = forge.pki.setRsaPublicKey(key.n, key.e);
      csr.sign(key); // forge's default digest is SHA-1
      await expect(issue(ca, forge.pki.certificationRequestToPem(csr))).rejects.toThrow(/signature algorithm/);
    },
    SLOW,
  );

  it("reads the key from the RSAPublicKey and holds its wrapper to RFC 3279", async () => {
    const ca = await loadOrCreateCa(freshDir());
    const keyPem = rsaKeyPem(2048);
    const { asn1 } = forge;
    const { UNIVERSAL, CONTEXT_SPECIFIC } = asn1.Class;
    const { SEQUENCE, INTEGER, OID, NULL, BITSTRING } = asn1.Type;
    const spkiOf = () =>
      forge.pki.publicKeyToAsn1(forge.pki.publicKeyFromPem(createPublicKey(keyPem).export({ format: "pem", type: "spki" }) as string));
    /** A CSR around `spki`, signed by the key itself (Node's crypto, so any wrapper can be signed). */
    const csrWith = (spki: forge.asn1.Asn1) => {
      const info = asn1.create(UNIVERSAL, SEQUENCE, true, [
        asn1.create(UNIVERSAL, INTEGER, false, asn1.integerToDer(0).getBytes()),
        asn1.create(UNIVERSAL, SEQUENCE, true, []),
        spki,
        asn1.create(CONTEXT_SPECIFIC, 0, true, []),
      ]);
      const infoDer = Buffer.from(asn1.toDer(info).getBytes(), "binary");
      const csr = asn1.create(UNIVERSAL, SEQUENCE, true, [
        info,
        asn1.create(UNIVERSAL, SEQUENCE, true, [
          asn1.create(UNIVERSAL, OID, false, asn1.oidToDer(forge.pki.oids.sha256WithRSAEncryption!).getBytes()),
          asn1.create(UNIVERSAL, NULL, false, ""),
        ]),
        asn1.create(UNIVERSAL, BITSTRING, false, `\0${sign("sha256", infoDer, keyPem).toString("binary")}`),
      ]);
      return pemOf("CERTIFICATE REQUEST", Buffer.from(asn1.toDer(csr).getBytes(), "binary"));
    };

    const issued = await issue(ca, csrWith(spkiOf()));
    expect(new X509Certificate(issued.certPem).publicKey.export({ format: "pem", type: "spki" })).toBe(
      createPublicKey(keyPem).export({ format: "pem", type: "spki" }),
    );

    const withParameters = spkiOf();
    ((withParameters.value as forge.asn1.Asn1[])[0]!.value as forge.asn1.Asn1[])[1] = asn1.create(
      UNIVERSAL,
      OID,
      false,
      asn1.oidToDer("1.2.3.4").getBytes(),
    );
    await expect(issue(ca, csrWith(withParameters))).rejects.toThrow(/parameters must be NULL/);

    const trailing = spkiOf();
    // forge keeps the RSAPublicKey as a child of the BIT STRING; as bytes, two more follow it.
    const children = trailing.value as forge.asn1.Asn1[];
    const rsaPublicKey = asn1.toDer((children[1]!.value as forge.asn1.Asn1[])[0]!).getBytes();
    children[1] = asn1.create(UNIVERSAL, BITSTRING, false, `\0${rsaPublicKey}\0\0`);
    await expect(issue(ca, csrWith(trailing))).rejects.toThrow(CsrError);
  });

  it("rejects garbage with CsrError", async () => {
    const ca = await loadOrCreateCa(freshDir());
    const inputs = [
      "",
      "hello",
      pemOf("CERTIFICATE REQUEST", Buffer.from("definitely not DER")),
      ca.certPem, // valid PEM, wrong kind of object
      pemOf("CERTIFICATE REQUEST", derOfPem(ca.certPem)),
      corruptBase64((await generateNodeKeyAndCsr()).csrPem),
      "x".repeat(1_000_000),
    ];
    for (const input of inputs) {
      await expect(issue(ca, input), JSON.stringify(input.slice(0, 40))).rejects.toThrow(CsrError);
    }
  });

  it("refuses a node id that is not a UUID", async () => {
    const ca = await loadOrCreateCa(freshDir());
    const { csrPem } = await generateNodeKeyAndCsr();
    await expect(issue(ca, csrPem, "node-1")).rejects.toThrow(TypeError);
  });
});

describe("identity helpers", () => {
  it("normalizes serials", () => {
    expect(canonicalSerial("0x00ab")).toBe("AB");
    expect(canonicalSerial("0a:bc")).toBe("0ABC");
    expect(canonicalSerial("00000F")).toBe("0F");
    expect(() => canonicalSerial("xyz")).toThrow(TypeError);
  });

  it("extracts the node id only from a well-formed URI SAN", () => {
    const id = randomUUID();
    expect(nodeIdFromCertificate({ subjectaltname: `DNS:a, URI:urn:modelforge:node:${id}` })).toBe(id);
    expect(nodeIdFromCertificate({ subjectaltname: `URI:urn:modelforge:node:${id.toUpperCase()}` })).toBe(id);
    expect(nodeIdFromCertificate({ subjectaltname: "URI:urn:modelforge:node:not-a-uuid" })).toBeUndefined();
    expect(nodeIdFromCertificate({ subjectaltname: `URI:urn:modelforge:node:${id}x` })).toBeUndefined();
    expect(
      nodeIdFromCertificate({ subjectaltname: `URI:urn:modelforge:node:${id}, URI:urn:modelforge:node:${randomUUID()}` }),
    ).toBeUndefined();
    expect(nodeIdFromCertificate({})).toBeUndefined();
  });
});

describe("agent's certificate validity", () => {
  it("reads each certificate's own validity, also after the certificate changes", async () => {
    const ca = await loadOrCreateCa(freshDir(), { commonName: "Validity CA" });
    const { csrPem } = await generateNodeKeyAndCsr();
    const now = new Date();
    const first = await ca.issueNodeCertificate(csrPem, randomUUID(), { validityMs: DAY, now });
    const renewed = await ca.issueNodeCertificate(csrPem, randomUUID(), { validityMs: 30 * DAY, now: new Date(now.getTime() + DAY) });
    const validity = validityReader();
    const expected = (c: typeof first) => ({ from: c.notBefore.getTime(), to: c.notAfter.getTime() });
    for (const [cert, issued] of [
      [first.certPem, first],
      [first.certPem, first],
      [renewed.certPem, renewed],
      [first.certPem, first],
    ] as const) {
      expect(validity(cert)).toEqual(expected(issued));
    }
  });
});

describe("server certificate", () => {
  it(
    "is reused while the names match and reissued when they change",
    async () => {
      const dir = freshDir();
      const ca = await loadOrCreateCa(dir);
      const first = await ca.ensureServerCertificate(dir, ["localhost", "127.0.0.1", "::1"]);
      const cert = new X509Certificate(first.certPem);

      expect(statSync(join(dir, "server.key")).mode & 0o777).toBe(0o600);
      expect(cert.verify(ca.x509.publicKey)).toBe(true);
      // An EC key (one cheap signature per TLS handshake) under the RSA CA.
      expect(cert.publicKey.asymmetricKeyType).toBe("ec");
      expect(cert.checkPrivateKey(createPrivateKey(first.keyPem))).toBe(true);
      expect(cert.subjectAltName).toBe("DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1");
      expect(cert.keyUsage).toEqual(["1.3.6.1.5.5.7.3.1"]); // serverAuth
      expect(new Date(cert.validTo).getTime() - Date.now()).toBeGreaterThan(360 * DAY);

      // Same set, other order and spelling.
      const same = await ca.ensureServerCertificate(dir, ["0:0:0:0:0:0:0:1", "LOCALHOST", "127.0.0.1", "localhost"]);
      expect(same).toEqual(first);

      const changed = await ca.ensureServerCertificate(dir, ["localhost", "127.0.0.1"]);
      expect(changed.certPem).not.toBe(first.certPem);
      expect(changed.keyPem).not.toBe(first.keyPem);
      expect(new X509Certificate(changed.certPem).subjectAltName).toBe("DNS:localhost, IP Address:127.0.0.1");
      expect(readFileSync(join(dir, "server.crt"), "utf8")).toBe(changed.certPem);
    },
    SLOW,
  );

  it(
    "is reissued when it was signed by another CA",
    async () => {
      const dir = freshDir();
      const other = await loadOrCreateCa(freshDir());
      const foreign = await other.ensureServerCertificate(dir, ["localhost"]);
      const ca = await loadOrCreateCa(join(dir, "ca"));
      const mine = await ca.ensureServerCertificate(dir, ["localhost"]);
      expect(mine.certPem).not.toBe(foreign.certPem);
      expect(new X509Certificate(mine.certPem).verify(ca.x509.publicKey)).toBe(true);
    },
    SLOW,
  );
});

describe("mutual TLS", () => {
  it(
    "authorizes a node certificate from our CA and identifies the node",
    async () => {
      const dir = freshDir();
      const ca = await loadOrCreateCa(dir);
      const server = await ca.ensureServerCertificate(dir, ["localhost", "127.0.0.1"]);
      const { keyPem, csrPem } = await generateNodeKeyAndCsr("worker");
      const nodeId = randomUUID();
      const issued = await issue(ca, csrPem, nodeId);

      const seen = await handshake(ca, server, { certPem: issued.certPem, keyPem });
      expect(seen.authorized).toBe(true);
      expect(seen.nodeId).toBe(nodeId);
      expect(canonicalSerial(seen.serial!)).toBe(issued.serial);
    },
    SLOW,
  );

  it(
    "does not authorize a node certificate from another CA",
    async () => {
      const dir = freshDir();
      const ca = await loadOrCreateCa(dir);
      const server = await ca.ensureServerCertificate(dir, ["127.0.0.1"]);
      const rogue = await loadOrCreateCa(freshDir());
      const { keyPem, csrPem } = await generateNodeKeyAndCsr("rogue");
      const issued = await issue(rogue, csrPem);

      const seen = await handshake(ca, server, { certPem: issued.certPem, keyPem });
      expect(seen.authorized).toBe(false);
      expect(seen.authorizationError).toBeDefined();
    },
    SLOW,
  );
});
