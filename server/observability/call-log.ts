// One log line per failed RPC (and one per call at debug level): status, method and path, with the
// request's correlation id. Never a body, header value or credential.
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { callerKey } from "../context.js";
import { codeName } from "../../common/codes.js";

const selfLogged = new WeakSet<ConnectError>();

/**
 * Marks a refusal its handler has already logged (or counted, under a flood), so that it is one
 * debug line here rather than a warn line per call.
 */
export function loggedByHandler(err: ConnectError): ConnectError {
  selfLogged.add(err);
  return err;
}

export function callLogInterceptor(): Interceptor {
  return (next) => async (req) => {
    const caller = req.contextValues.get(callerKey);
    const started = performance.now();
    const fields = () => ({
      method: req.method.name,
      path: `/${req.service.typeName}/${req.method.name}`,
      ms: Math.round(performance.now() - started),
    });
    // Returns the error to send: an unexpected one is logged here and replaced by a bare
    // "internal error", so database or library messages never reach the caller.
    const failed = (err: unknown): ConnectError => {
      if (!(err instanceof ConnectError)) {
        caller?.log.error({ ...fields(), code: "internal", err: describe(err) }, "rpc failed");
        return new ConnectError(`internal error (request ${caller?.correlationId ?? "unknown"})`, Code.Internal);
      }
      const line = { ...fields(), code: codeName(err.code), message: err.rawMessage };
      if (err.code === Code.Internal || err.code === Code.Unknown) caller?.log.error(line, "rpc failed");
      else if (selfLogged.has(err)) caller?.log.debug(line, "rpc refused");
      else caller?.log.warn(line, "rpc refused");
      return err;
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

function describe(err: unknown): { name: string; message: string; stack?: string } {
  if (err instanceof Error) return { name: err.name, message: err.message, stack: err.stack };
  return { name: "non-error", message: String(err) };
}
