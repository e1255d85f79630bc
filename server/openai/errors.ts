// OpenAI's error shape for the contract's typed errors, pure. The SDKs pick their error class by
// HTTP status (400 BadRequestError, 401 AuthenticationError, 403 PermissionDeniedError, 404
// NotFoundError, 429 RateLimitError, 5xx InternalServerError) and read `error.code`, so the status
// carries the meaning and the body says it in OpenAI's words.
import { Code, ConnectError } from "@connectrpc/connect";

export interface OpenAiErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export interface OpenAiFailure {
  status: number;
  body: OpenAiErrorBody;
  /** Seconds, for 429 and 503: when a retry may succeed. */
  retryAfter?: number;
}

/** The longest message an answer carries; a runtime's or a node's text is cut to it. */
const maxMessage = 512;

export function openAiFailure(
  status: number,
  message: string,
  type: string,
  code: string | null = null,
  param: string | null = null,
  retryAfter?: number,
): OpenAiFailure {
  return {
    status,
    body: { error: { message: sanitised(message), type, param, code } },
    ...(retryAfter !== undefined ? { retryAfter } : {}),
  };
}

/** Control characters out, bounded: a message may quote what a runtime said. */
function sanitised(message: string): string {
  const clean = message.replace(/[\u0000-\u001f\u007f]+/g, " ");
  return clean.length > maxMessage ? `${clean.slice(0, maxMessage - 1)}…` : clean;
}

/** A failure of the invoke path (a ConnectError, or anything else: our own fault) in OpenAI's shape. */
export function openAiFailureOf(err: unknown): OpenAiFailure {
  if (!(err instanceof ConnectError)) return openAiFailure(500, "internal error", "server_error", "internal_error");
  const message = err.rawMessage;
  switch (err.code) {
    case Code.InvalidArgument:
    case Code.OutOfRange:
      return openAiFailure(400, message, "invalid_request_error", "invalid_request");
    case Code.Unauthenticated:
      return openAiFailure(401, message, "invalid_request_error", "invalid_api_key");
    case Code.PermissionDenied:
      return openAiFailure(403, message, "permission_error", "permission_denied");
    case Code.NotFound:
      return openAiFailure(404, message, "invalid_request_error", "model_not_found", "model");
    case Code.ResourceExhausted:
      return tooMany(err);
    case Code.Unavailable:
    case Code.FailedPrecondition:
    case Code.Aborted:
      return openAiFailure(503, message, "service_unavailable", "service_unavailable", null, retryAfterOf(err));
    case Code.DeadlineExceeded:
      return openAiFailure(504, message, "timeout", "timeout");
    case Code.Canceled:
      return openAiFailure(499, message, "canceled", "canceled");
    default:
      return openAiFailure(500, "internal error", "server_error", "internal_error");
  }
}

/** 429: a quota used up is `insufficient_quota`, anything else a rate; Retry-After as the refusal says. */
function tooMany(err: ConnectError): OpenAiFailure {
  const limit = err.metadata.get("x-modelforge-limit");
  const quota = limit === "dailyTokens" || limit === "monthlyTokens";
  return openAiFailure(
    429,
    err.rawMessage,
    quota ? "insufficient_quota" : "rate_limit_error",
    quota ? "insufficient_quota" : "rate_limit_exceeded",
    null,
    retryAfterOf(err),
  );
}

/** The seconds the refusal asks the caller to wait (a cold start's hold says 5), else 1. */
function retryAfterOf(err: ConnectError): number {
  const retryAfter = Number(err.metadata.get("retry-after") ?? "1");
  return Number.isSafeInteger(retryAfter) && retryAfter > 0 ? retryAfter : 1;
}
