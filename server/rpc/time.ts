// Durations a request carries, as handlers use them.
import type { Duration } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";

/** A request's Duration in milliseconds; zero or negative is refused. */
export function positiveDurationMs(d: Duration): number {
  const ms = Number(d.seconds) * 1000 + Math.round(d.nanos / 1e6);
  if (!Number.isFinite(ms) || ms <= 0) throw new ConnectError("durations must be positive", Code.InvalidArgument);
  return ms;
}

/** A request's Duration in milliseconds, zero allowed; a negative one is refused, naming its field. */
export function durationMs(d: Duration, field: string): number {
  const ms = Number(d.seconds) * 1000 + Math.round(d.nanos / 1e6);
  if (!Number.isFinite(ms) || ms < 0) throw new ConnectError(`${field}: must not be negative`, Code.InvalidArgument);
  return ms;
}
