// One log line per failed RPC (and one per call at debug level): status, method and path, with the
// request's correlation id. Never a body, header value or credential.
//
// `publicError` decides what any failure becomes on the wire, for unary calls, Connect streams
// and the Session (../sessions/session.ts, ../sessions/session-grpc.ts) alike: a ConnectError as
// thrown; a database connectivity failure `unavailable` (server/db/availability.ts), logged by
// the outage monitor rather than per call; anything else a bare `internal` with the details in
// the log only. Nothing ever answers `unknown`.
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { callerKey } from "../context.js";
import { codeName } from "../../common/codes.js";
import { unavailableError, type OutageSink } from "../db/availability.js";

const selfLogged = new WeakSet<ConnectError>();

/**
 * Marks a refusal its handler has already logged (or counted, under a flood), so that it is one
 * debug line here rather than a warn line per call.
 */
export function loggedByHandler(err: ConnectError): ConnectError {
  selfLogged.add(err);
  return err;
}

/** What a failure is answered with, and how loudly it is logged here. */
export interface PublicError {
  error: ConnectError;
  /** error: a bug or unexpected failure; warn: a refusal; debug: a database outage or a refusal, reported once elsewhere. */
  level: "error" | "warn" | "debug";
  /** The original error's description, for an unexpected failure only. */
  detail?: { name: string; message: string; stack?: string };
}

/**
 * `outage`, when the database is open, hears of every connectivity failure (it logs the outage
 * once). `callerGone`: the caller had already gone away (reset its stream, closed its connection),
 * so whatever failed after is its doing, `canceled`, not ours: a write to a stream it destroyed,
 * a forwarded call it abandoned.
 */
export function publicError(err: unknown, correlationId: string | undefined, outage?: OutageSink, callerGone = false): PublicError {
  const internal = () => new ConnectError(`internal error (request ${correlationId ?? "unknown"})`, Code.Internal);
  if (callerGone) return { error: err instanceof ConnectError && err.code === Code.Canceled ? err : callerWentAway(), level: "debug" };
  if (err instanceof ConnectError) {
    if (err.code === Code.Unknown) return { error: internal(), level: "error", detail: describe(err) };
    // Nothing for an operator to act on: the caller cancelled.
    if (err.code === Code.Canceled) return { error: err, level: "debug" };
    // A refusal its handler already logged (or counted, under a flood) is one debug line here.
    return { error: err, level: err.code === Code.Internal ? "error" : selfLogged.has(err) ? "debug" : "warn" };
  }
  const unavailable = unavailableError(err);
  if (unavailable !== undefined) {
    outage?.failed(err);
    return { error: unavailable, level: "debug" };
  }
  return { error: internal(), level: "error", detail: describe(err) };
}

export function callLogInterceptor(outage?: OutageSink): Interceptor {
  return (next) => async (req) => {
    const caller = req.contextValues.get(callerKey);
    const started = performance.now();
    const fields = () => ({
      method: req.method.name,
      path: `/${req.service.typeName}/${req.method.name}`,
      ms: Math.round(performance.now() - started),
    });
    // Returns the error to send, so database or library messages never reach the caller.
    const failed = (err: unknown): ConnectError => {
      const { error, level, detail } = publicError(err, caller?.correlationId, outage, callerGone(req.signal));
      const line = { ...fields(), code: codeName(error.code), message: error.rawMessage, ...(detail ? { err: detail } : {}) };
      caller?.log[level](line, level === "error" ? "rpc failed" : "rpc refused");
      return error;
    };
    try {
      const res = await next(req);
      if (!res.stream) {
        caller?.log.debug(fields(), "rpc ok");
        return res;
      }
      const messages = res.message;
      return {
        ...res,
        message: (async function* () {
          try {
            yield* messages;
            caller?.log.debug(fields(), "rpc stream ended");
          } catch (err) {
            throw failed(err);
          }
        })(),
      };
    } catch (err) {
      throw failed(err);
    }
  };
}

/** Whether the call's signal says its caller went away (and not that its deadline passed). */
function callerGone(signal: AbortSignal): boolean {
  if (!signal.aborted) return false;
  const reason: unknown = signal.reason;
  return !(reason instanceof ConnectError && reason.code === Code.DeadlineExceeded);
}

const callerWentAway = () => new ConnectError("the caller went away", Code.Canceled);

function describe(err: unknown): { name: string; message: string; stack?: string } {
  if (err instanceof Error) return { name: err.name, message: err.message, stack: err.stack };
  return { name: "non-error", message: String(err) };
}
