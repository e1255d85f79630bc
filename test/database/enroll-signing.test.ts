// Enrollment signs a certificate only for a caller whose token it has claimed: an unknown, used or
// revoked token, or a lost race, costs no private-key operation. A real database and the real CA,
// with the CA's signing counted.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { Code } from "@connectrpc/connect";
import { loadOrCreateCa, type Ca } from "../../server/identity/pki/ca.js";
import { createEnrollmentToken } from "../../server/identity/enrollment/tokens.js";
import { enroller } from "../../server/identity/enrollment/enroll.js";
import { generateNodeKeyAndCsr } from "../../agent/pki/keys.js";
import { systemClock } from "../../common/clock.js";
import { useTestDatabase } from "../support/db.js";

const tdb = useTestDatabase();
let certs: string;
let signed = 0;
let enroll: ReturnType<typeof enroller>;
const { csrPem } = await generateNodeKeyAndCsr("signing");

beforeAll(async () => {
  certs = mkdtempSync(join(tmpdir(), "mf-enroll-signing-"));
  const ca = await loadOrCreateCa(certs);
  // The real CA, its signatures counted.
  const counting: Pick<Ca, "issueNodeCertificate" | "prepareNodeCertificate"> = {
    issueNodeCertificate: (...args) => {
      signed++;
      return ca.issueNodeCertificate(...args);
    },
    prepareNodeCertificate: (...args) => {
      const prepared = ca.prepareNodeCertificate(...args);
      const sign = () => {
        signed++;
        return prepared.sign();
      };
      return { ...prepared, sign };
    },
  };
  enroll = enroller({
    prisma: tdb.db.prisma,
    direct: tdb.db.direct,
    ca: counting,
    clock: systemClock,
    log: pino({ level: "silent" }),
    credentialTtlMs: 86_400_000,
  });
});
afterAll(async () => {
  if (certs) rmSync(certs, { recursive: true, force: true });
});

const tokenDeps = () => ({
  prisma: tdb.db.prisma,
  clock: systemClock,
  defaultTtlMs: 600_000,
  sessions: { closeSerials: () => undefined },
  join: { serverUrl: "https://127.0.0.1:8443", caFingerprint: "sha256:x" },
});
const newToken = async () =>
  (
    await createEnrollmentToken(tokenDeps(), {
      nodeName: "",
      nodeId: "",
      ttlMs: undefined,
      labels: {},
      correlationId: "t",
      by: { actor: "break-glass" },
    })
  ).secret;
// Each from its own address: the failure limit is not what this is about.
let peer = 0;
const attempt = (token: string) =>
  enroll({ token, csrPem, nodeName: "n", agentVersion: "1.0.0", correlationId: "t", peerAddress: `10.0.0.${++peer}` });

describe("enrollment signing", () => {
  it("signs once for a claimed token, never for an unknown or used one", async () => {
    const token = await newToken();
    signed = 0;
    const enrolled = await attempt(token);
    expect(enrolled.certPem).toContain("BEGIN CERTIFICATE");
    expect(signed).toBe(1);

    await expect(attempt(token)).rejects.toMatchObject({ code: Code.Unauthenticated }); // used
    await expect(attempt(`mfet_${"A".repeat(43)}`)).rejects.toMatchObject({ code: Code.Unauthenticated }); // unknown
    expect(signed).toBe(1);
  });

  it("ten callers racing for one token: one node, one signature", async () => {
    const token = await newToken();
    signed = 0;
    const results = await Promise.allSettled(Array.from({ length: 10 }, () => attempt(token)));
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
    expect(signed).toBe(1);
  });
});
