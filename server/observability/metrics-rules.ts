// The closed sets metric labels take, and the pure rules that map what happened onto them. A label
// value never comes from a node or a caller as it was sent: an unbounded value would let anyone
// grow the scrape (and Prometheus) without limit.
import { Code, ConnectError } from "@connectrpc/connect";
import { codeName } from "../../common/codes.js";
import { isKnownCapability } from "../../common/capabilities.js";
import { isDatabaseUnavailable } from "../db/availability.js";

/** Why a Session ended before it was open (the Welcome was never sent). */
export const sessionRefusalReasons = [
  "unauthenticated", // no, unknown, revoked or expired credential
  "permission_denied", // disabled or decommissioned node
  "invalid_hello", // first message not a valid Hello
  "protocol_version", // a protocol version this server does not speak
  "unavailable", // admission gate full, database unreachable or server shutting down
  "flood", // too many messages waiting before the Welcome
  "agent_left", // the agent closed the stream while waiting
  "other",
] as const;
export type SessionRefusalReason = (typeof sessionRefusalReasons)[number];

export function sessionRefusalReason(code: Code): SessionRefusalReason {
  switch (code) {
    case Code.Unauthenticated:
      return "unauthenticated";
    case Code.PermissionDenied:
      return "permission_denied";
    case Code.InvalidArgument:
      return "invalid_hello";
    case Code.Aborted:
      return "protocol_version";
    case Code.Unavailable:
      return "unavailable";
    case Code.ResourceExhausted:
      return "flood";
    case Code.Canceled:
      return "agent_left";
    default:
      return "other";
  }
}

/** An RPC's outcome: "ok" or the Connect code's wire name (a closed set of 16). */
export function rpcOutcome(err: unknown): string {
  if (err === undefined) return "ok";
  if (err instanceof ConnectError) return codeName(err.code === Code.Unknown ? Code.Internal : err.code);
  return isDatabaseUnavailable(err) ? "unavailable" : "internal";
}

/** Database query failures, by what an operator does about them. */
export const queryErrorKinds = ["unavailable", "conflict", "constraint", "timeout", "other"] as const;
export type QueryErrorKind = (typeof queryErrorKinds)[number];

/** Driver kinds (@prisma/adapter-pg, pglite-prisma-adapter) and SQLSTATEs, by kind. */
const conflictKinds = new Set(["TransactionWriteConflict"]);
const constraintKinds = new Set([
  "UniqueConstraintViolation",
  "NullConstraintViolation",
  "ForeignKeyConstraintViolation",
  "RestrictViolation",
]);

/**
 * The kind of a failed query: `unavailable` (the connectivity failures of ../db/availability.ts),
 * `conflict` (serialization failure 40001, deadlock 40P01, lock not available 55P03),
 * `constraint` (SQLSTATE class 23), `timeout` (57014: statement timeout or cancel), else `other`.
 */
export function queryErrorKind(err: unknown): QueryErrorKind {
  if (isDatabaseUnavailable(err)) return "unavailable";
  const found = { kind: undefined as string | undefined, code: undefined as string | undefined };
  scan(err, found, 0);
  if ((found.kind !== undefined && conflictKinds.has(found.kind)) || ["40001", "40P01", "55P03"].includes(found.code ?? "")) {
    return "conflict";
  }
  if ((found.kind !== undefined && constraintKinds.has(found.kind)) || found.code?.startsWith("23")) return "constraint";
  if (found.code === "57014") return "timeout";
  return "other";
}

function scan(err: unknown, found: { kind: string | undefined; code: string | undefined }, depth: number): void {
  if (depth > 4 || typeof err !== "object" || err === null) return;
  const e = err as { kind?: unknown; code?: unknown; originalCode?: unknown; cause?: unknown };
  if (found.kind === undefined && typeof e.kind === "string" && e.kind !== "postgres") found.kind = e.kind;
  for (const code of [e.originalCode, e.code]) {
    if (found.code === undefined && typeof code === "string" && /^[0-9A-Z]{5}$/.test(code)) found.code = code;
  }
  scan(e.cause, found, depth + 1);
}

/** Node states as the metrics show them: the reconciled liveness, with disabled and decommissioned overriding it. */
export const nodeStates = ["pending", "online", "stale", "offline", "disabled", "decommissioned"] as const;
/** Job states as stored. */
export const jobStates = ["pending", "leased", "succeeded", "failed", "cancelled"] as const;

/** A capability label: a name of the contract, else "unknown". */
export function capabilityLabel(name: string): string {
  return isKnownCapability(name) ? name : "unknown";
}
