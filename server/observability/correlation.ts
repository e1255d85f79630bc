// Correlation ids: the caller's x-request-id when it is sane, else a fresh UUID. Returned in a
// response header and bound to every log line of the request.
import { randomUUID } from "node:crypto";

export const correlationHeader = "x-request-id";

const acceptable = /^[A-Za-z0-9._:-]{1,128}$/;

export function correlationIdFrom(headerValue: string | string[] | undefined): string {
  const v = Array.isArray(headerValue) ? headerValue[0] : headerValue;
  return v !== undefined && acceptable.test(v) ? v : randomUUID();
}
