// A new node's enrollment is one statement run straight on the driver (server/identity/enrollment/sql.ts):
// what it writes, field by field, and what it refuses to claim, on the backend the run uses.
import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { enrollNewNode, type NewNodeEnrollment } from "../../server/identity/enrollment/sql.js";
import { useTestDatabase } from "../support/db.js";

const tdb = useTestDatabase();
const now = new Date("2026-12-02T06:00:00.123Z");

/** A token row as the admin API stores it; its hash is what enrollment presents. */
async function token(fields: { nodeName?: string; labels?: Record<string, string>; expiresAt?: Date; nodeId?: string } = {}) {
  const tokenHash = `hash-${randomUUID()}`;
  const id = randomUUID();
  await tdb.db.prisma.enrollmentToken.create({
    data: {
      id,
      tokenHash,
      nodeName: fields.nodeName ?? null,
      labels: fields.labels ?? {},
      expiresAt: fields.expiresAt ?? new Date(now.getTime() + 600_000),
      nodeId: fields.nodeId ?? null,
    },
  });
  return { id, tokenHash };
}

function enrollment(tokenHash: string, over: Partial<NewNodeEnrollment> = {}): NewNodeEnrollment {
  const nodeId = randomUUID();
  return {
    tokenHash,
    nodeId,
    requestedName: "",
    agentVersion: "1.2.3",
    serial: randomUUID().replaceAll("-", ""),
    notAfter: new Date(now.getTime() + 86_400_000),
    now,
    audit: { id: randomUUID(), actor: `node:${nodeId}`, correlationId: "corr-1" },
    ...over,
  };
}

describe("enrollNewNode", () => {
  it("claims the token and writes the node, its credential and the audit event", async () => {
    const t = await token({ nodeName: "from-token", labels: { rack: "r1" } });
    const e = enrollment(t.tokenHash, { agentVersion: null });
    expect(await enrollNewNode(tdb.db.direct, e)).toBe(true);

    const node = await tdb.db.prisma.node.findUniqueOrThrow({ where: { id: e.nodeId } });
    expect(node).toMatchObject({ name: "from-token", labels: { rack: "r1" }, agentVersion: null });
    expect(node.createdAt).toEqual(now);
    expect(node.livenessChangedAt).toEqual(now);
    const credential = await tdb.db.prisma.nodeCredential.findUniqueOrThrow({ where: { serial: e.serial } });
    expect(credential).toMatchObject({ nodeId: e.nodeId, issuedAt: now, expiresAt: e.notAfter, revokedAt: null });
    const used = await tdb.db.prisma.enrollmentToken.findUniqueOrThrow({ where: { id: t.id } });
    expect(used).toMatchObject({ usedAt: now, usedByNodeId: e.nodeId });
    const audit = await tdb.db.prisma.auditEvent.findUniqueOrThrow({ where: { id: e.audit.id } });
    expect(audit).toMatchObject({
      actor: e.audit.actor,
      action: "node.enrolled",
      targetType: "node",
      targetId: e.nodeId,
      correlationId: "corr-1",
      details: { enrollmentTokenId: t.id, serial: e.serial },
    });
    expect(audit.time).toEqual(now);
  });

  it.each([
    { requested: "asked", onToken: "from-token", named: () => "asked" },
    { requested: "", onToken: "from-token", named: () => "from-token" },
    { requested: "", onToken: "", named: (id: string) => `node-${id.slice(0, 8)}` },
    { requested: "", onToken: undefined, named: (id: string) => `node-${id.slice(0, 8)}` },
  ])("names the node: asked $requested, token $onToken", async ({ requested, onToken, named }) => {
    const t = await token(onToken === undefined ? {} : { nodeName: onToken });
    const e = enrollment(t.tokenHash, { requestedName: requested });
    expect(await enrollNewNode(tdb.db.direct, e)).toBe(true);
    expect((await tdb.db.prisma.node.findUniqueOrThrow({ where: { id: e.nodeId } })).name).toBe(named(e.nodeId));
  });

  it("claims nothing and writes nothing for a token it may not use", async () => {
    const used = await token();
    expect(await enrollNewNode(tdb.db.direct, enrollment(used.tokenHash))).toBe(true);
    const bound = await token();
    const e0 = enrollment(bound.tokenHash);
    expect(await enrollNewNode(tdb.db.direct, e0)).toBe(true);
    await tdb.db.prisma.enrollmentToken.update({ where: { id: bound.id }, data: { usedAt: null, nodeId: e0.nodeId } });
    const expired = await token({ expiresAt: new Date(now.getTime() - 1) });
    const revoked = await token();
    await tdb.db.prisma.enrollmentToken.update({ where: { id: revoked.id }, data: { revokedAt: now } });

    const nodesBefore = await tdb.db.prisma.node.count();
    const credentialsBefore = await tdb.db.prisma.nodeCredential.count();
    const auditBefore = await tdb.db.prisma.auditEvent.count();
    for (const hash of [used.tokenHash, bound.tokenHash, expired.tokenHash, revoked.tokenHash, "hash-unknown"]) {
      expect(await enrollNewNode(tdb.db.direct, enrollment(hash)), hash).toBe(false);
    }
    expect(await tdb.db.prisma.node.count()).toBe(nodesBefore);
    expect(await tdb.db.prisma.nodeCredential.count()).toBe(credentialsBefore);
    expect(await tdb.db.prisma.auditEvent.count()).toBe(auditBefore);
  });

  it("lets exactly one of many concurrent callers claim a token", async () => {
    const t = await token();
    const attempts = Array.from({ length: 8 }, () => enrollment(t.tokenHash));
    const results = await Promise.all(attempts.map((e) => enrollNewNode(tdb.db.direct, e)));
    expect(results.filter(Boolean)).toHaveLength(1);
    const winner = attempts[results.indexOf(true)]!;
    expect(await tdb.db.prisma.node.count({ where: { id: { in: attempts.map((e) => e.nodeId) } } })).toBe(1);
    expect((await tdb.db.prisma.enrollmentToken.findUniqueOrThrow({ where: { id: t.id } })).usedByNodeId).toBe(winner.nodeId);
  });
});
