// Enrollment: a one-time token and a CSR become a node and its first (or, for a recovery token, its
// next) credential. The token is claimed with a conditional update in the same atomic step that
// creates the node and credential, so of any number of concurrent callers exactly one wins.
// Failed enrollments are limited per peer address (./failure-limit.ts), and their log lines are
// flood-proof (../../observability/flood-log.ts): guessing tokens is slow, cheap to refuse, and cannot fill the log.
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { CsrError } from "../pki/ca.js";
import { secretsEqual } from "../admin-token.js";
import { recordAudit, nodeActor } from "../../audit/audit.js";
import { hashEnrollmentSecret, tokenState } from "./token.js";
import { enrollNewNode } from "./sql.js";
import { loggedByHandler } from "../../observability/call-log.js";
import { enrollmentFailureLimit, FailureLimiter, peerKey } from "./failure-limit.js";
import { floodPolicy, FloodLogger } from "../../observability/flood-log.js";
import type { PrismaClient } from "../../../gen/prisma/client.js";
import type { DirectQuery } from "../../db/direct.js";
import type { Clock } from "../../../common/clock.js";
import type { Logger } from "../../observability/logger.js";
import type { Ca, IssuedNodeCertificate } from "../pki/ca.js";
import type { PreparedNodeCertificate } from "../pki/node-cert.js";

/** What enrollment works with. */
export interface EnrollDeps {
  prisma: PrismaClient;
  /** The same database straight through its driver, for the enrollment's one statement (./sql.ts). */
  direct: DirectQuery;
  ca: Pick<Ca, "issueNodeCertificate" | "prepareNodeCertificate">;
  clock: Clock;
  log: Logger;
  /** Lifetime of an issued node certificate. */
  credentialTtlMs: number;
}

export interface EnrollInput {
  token: string;
  csrPem: string;
  nodeName: string;
  agentVersion: string;
  correlationId: string;
  /** The caller's IP address, which failed attempts are limited and logged by. */
  peerAddress: string | undefined;
}

export interface Enrolled {
  nodeId: string;
  certPem: string;
  notAfter: Date;
}

const maxCsrBytes = 16 * 1024;
const maxNameLength = 128;

/**
 * Enrollment for one server: a peer that has failed too often is refused with resource_exhausted
 * and a retry delay (in the message and a `retry-after` header, in seconds) before its token is
 * looked at. `clock` is monotonic milliseconds.
 */
export function enroller(deps: EnrollDeps, clock: () => number = () => deps.clock.now()): (input: EnrollInput) => Promise<Enrolled> {
  const limiter = new FailureLimiter(enrollmentFailureLimit);
  const refusals = new FloodLogger(deps.log, "enrollment refused", floodPolicy, clock);
  return async (input) => {
    const peer = peerKey(input.peerAddress);
    const peerAddress = input.peerAddress ?? "unknown";
    const refused = limiter.admit(peer, clock());
    if (refused !== undefined) {
      const seconds = Math.ceil(refused.waitMs / 1000);
      const reason =
        refused.cause === "in_flight"
          ? `too many enrollments in flight from this address (at most ${enrollmentFailureLimit.burst} at once)`
          : "too many failed enrollments from this address";
      refusals.warn(peerAddress, { reason, retryAfterSeconds: seconds, correlationId: input.correlationId });
      throw loggedByHandler(
        new ConnectError(`${reason}; retry in ${seconds} s`, Code.ResourceExhausted, { "retry-after": String(seconds) }),
      );
    }
    let guessed = false;
    try {
      return await enroll(deps, input);
    } catch (err) {
      if (!(err instanceof ConnectError) || err.code !== Code.Unauthenticated) throw err;
      // Only an unknown token is guessing: the losers of a race for a real token, or an agent
      // retrying with its used one, hold a real secret.
      guessed = unknownTokens.has(err);
      refusals.warn(peerAddress, { reason: err.rawMessage, correlationId: input.correlationId });
      throw loggedByHandler(err);
    } finally {
      limiter.settle(peer, clock(), guessed);
    }
  };
}

// Marks the refusals of unknown tokens (ConnectError's own `instanceof` sees every ConnectError as
// an instance of any subclass, so a subclass cannot tell them apart).
const unknownTokens = new WeakSet<ConnectError>();

function unknownToken(): ConnectError {
  const err = new ConnectError("enrollment token not valid", Code.Unauthenticated);
  unknownTokens.add(err);
  return err;
}

async function enroll(deps: EnrollDeps, input: EnrollInput): Promise<Enrolled> {
  if (input.token === "") throw new ConnectError("token is required", Code.InvalidArgument);
  if (input.csrPem === "") throw new ConnectError("csr_pem is required", Code.InvalidArgument);
  if (input.csrPem.length > maxCsrBytes) throw new ConnectError("csr_pem is too large", Code.InvalidArgument);
  if (input.nodeName.length > maxNameLength) {
    throw new ConnectError(`node_name is longer than ${maxNameLength} characters`, Code.InvalidArgument);
  }
  const prisma = deps.prisma;
  const now = new Date(deps.clock.now());
  const tokenHash = hashEnrollmentSecret(input.token);
  const csrRefused = (err: unknown) => (err instanceof CsrError ? new ConnectError(`csr_pem: ${err.message}`, Code.InvalidArgument) : err);
  const issue = (nodeId: string) =>
    deps.ca.issueNodeCertificate(input.csrPem, nodeId, { validityMs: deps.credentialTtlMs, now }).catch((err) => {
      throw csrRefused(err);
    });

  // The common case, a new node, in one statement: the request is checked first (a bad CSR never
  // burns the token), the token claimed and the node and credential recorded together, and only
  // then is the certificate signed, so no caller without a live token costs a private-key
  // operation. Signing a checked request with the loaded CA key does not fail in practice; if it
  // did, the node would hold no certificate for the credential recorded and need a recovery token.
  const newNodeId = randomUUID();
  let prepared: PreparedNodeCertificate;
  try {
    prepared = deps.ca.prepareNodeCertificate(input.csrPem, newNodeId, { validityMs: deps.credentialTtlMs, now });
  } catch (err) {
    throw csrRefused(err);
  }
  const claimed = await enrollNewNode(deps.direct, {
    tokenHash,
    nodeId: newNodeId,
    requestedName: input.nodeName,
    agentVersion: input.agentVersion || null,
    serial: prepared.serial,
    notAfter: prepared.notAfter,
    now,
    audit: { id: randomUUID(), actor: nodeActor(newNodeId), correlationId: input.correlationId },
  });
  if (claimed) return enrolled(deps, newNodeId, { ...prepared, certPem: await prepared.sign() }, input);

  // Nothing claimed: say why, or take the recovery path of a token bound to a node.
  const token = await prisma.enrollmentToken.findUnique({ where: { tokenHash } });
  if (token === null || !secretsEqual(token.tokenHash, tokenHash)) throw unknownToken();
  const state = tokenState(token, now);
  if (state !== "active") throw new ConnectError(`enrollment token ${state}`, Code.Unauthenticated);
  if (token.nodeId === null) throw new ConnectError("enrollment token used", Code.Unauthenticated); // lost the race
  const reissued = await issue(token.nodeId);
  await reenroll(deps, token.id, token.nodeId, reissued, input, now);
  return enrolled(deps, token.nodeId, reissued, input);
}

function enrolled(deps: EnrollDeps, nodeId: string, issued: IssuedNodeCertificate, input: EnrollInput): Enrolled {
  deps.log.info({ nodeId, serial: issued.serial, correlationId: input.correlationId }, "node enrolled");
  return { nodeId, certPem: issued.certPem, notAfter: issued.notAfter };
}

/**
 * A token bound to a node: the recovery path (the same node id, any credential issued meanwhile
 * revoked, one new one), or the first enrollment of a pre-registered node (its name and labels kept).
 */
async function reenroll(
  deps: EnrollDeps,
  tokenId: string,
  nodeId: string,
  issued: { serial: string; notAfter: Date },
  input: EnrollInput,
  now: Date,
): Promise<void> {
  await deps.prisma.$transaction(async (tx) => {
    const claim = await tx.enrollmentToken.updateMany({
      where: { id: tokenId, usedAt: null, revokedAt: null, expiresAt: { gt: now } },
      data: { usedAt: now, usedByNodeId: nodeId },
    });
    if (claim.count !== 1) throw new ConnectError("enrollment token used", Code.Unauthenticated);
    const node = await tx.node.findUnique({ where: { id: nodeId } });
    if (node === null) throw new ConnectError("the node this token re-enrolls no longer exists", Code.NotFound);
    if (node.decommissionedAt !== null) {
      throw new ConnectError("node decommissioned: it cannot enroll again", Code.PermissionDenied);
    }
    // A pre-registered node (RegisterNode) has never held a credential: this is its enrollment.
    const first = (await tx.nodeCredential.count({ where: { nodeId } })) === 0;
    await tx.nodeCredential.updateMany({
      where: { nodeId, revokedAt: null },
      data: { revokedAt: now, revokedReason: "re-enrolled" },
    });
    await tx.node.update({
      where: { id: nodeId },
      data: { agentVersion: input.agentVersion || null, renewalRequestedAt: null, renewalReason: null },
    });
    await tx.nodeCredential.create({
      data: { serial: issued.serial, nodeId, issuedAt: now, expiresAt: issued.notAfter },
    });
    await recordAudit(tx, {
      actor: nodeActor(nodeId),
      action: first ? "node.enrolled" : "node.reenrolled",
      targetType: "node",
      targetId: nodeId,
      correlationId: input.correlationId,
      details: { enrollmentTokenId: tokenId, serial: issued.serial },
    });
  });
}
