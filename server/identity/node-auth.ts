// Node authentication, on every node RPC and when a stream opens: a certificate that chains to our
// CA (checked by TLS), names a node, and whose serial is active in the database for that node,
// whose node is enabled and not decommissioned.
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { callOf, type Caller } from "../context.js";
import { canonicalSerial, nodeIdFromCertificate } from "./pki/ca.js";
import type { PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";

export interface NodeIdentity {
  nodeId: string;
  serial: string;
  /** The certificate's own expiry (ms), for the renewal rule. */
  certificateExpiresAt: number;
}

/** The certificate part: who the TLS layer says is calling. No database. */
export function presentedIdentity(caller: Pick<Caller, "certificate" | "certificateError">): NodeIdentity {
  const cert = caller.certificate;
  if (cert === undefined) {
    throw new ConnectError(
      caller.certificateError !== undefined ? `client certificate not accepted: ${caller.certificateError}` : "client certificate required",
      Code.Unauthenticated,
    );
  }
  const nodeId = nodeIdFromCertificate(cert);
  if (nodeId === undefined) throw new ConnectError("client certificate names no node", Code.Unauthenticated);
  return { nodeId, serial: canonicalSerial(cert.serialNumber), certificateExpiresAt: Date.parse(cert.valid_to) };
}

/** The database part: the credential is active and belongs to that node, and the node may act. */
export async function authorizeNode(prisma: PrismaClient, identity: NodeIdentity, now: Date) {
  const credential = await prisma.nodeCredential.findUnique({
    where: { serial: identity.serial },
    include: { node: true },
  });
  return checkAuthorized(credential, identity, now);
}

/**
 * The rule over the rows read (by authorizeNode, or by a query that loads more with them, as a
 * session's open does): returns the node, or throws why it may not act.
 */
export function checkAuthorized<N extends NodeGate>(
  credential: { nodeId: string; revokedAt: Date | null; expiresAt: Date; node: N } | null,
  identity: NodeIdentity,
  now: Date,
): N {
  if (credential === null || credential.nodeId !== identity.nodeId) {
    throw new ConnectError("credential unknown", Code.Unauthenticated);
  }
  if (credential.revokedAt !== null) throw new ConnectError("credential revoked", Code.Unauthenticated);
  if (credential.expiresAt <= now) throw new ConnectError("credential expired", Code.Unauthenticated);
  const node = credential.node;
  if (node.decommissionedAt !== null) throw new ConnectError("node decommissioned", Code.PermissionDenied);
  if (node.disabledAt !== null) {
    throw new ConnectError(`node disabled${node.disabledReason ? `: ${node.disabledReason}` : ""}`, Code.PermissionDenied);
  }
  return node;
}

interface NodeGate {
  decommissionedAt: Date | null;
  disabledAt: Date | null;
  disabledReason: string | null;
}

export async function authenticateNode(prisma: PrismaClient, ctx: HandlerContext, clock: Clock) {
  const identity = presentedIdentity(callOf(ctx));
  const node = await authorizeNode(prisma, identity, new Date(clock.now()));
  return { identity, node };
}
