// How job rule violations become Connect errors: the pure rules name a code, this maps it.
import { Code, ConnectError } from "@connectrpc/connect";
import { JobSpecError } from "./spec.js";
import type { ReportCheck } from "./lease.js";
import { LEASE_LOST } from "./lease.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A job id as stored (lowercase), or invalid_argument naming the field. */
export function jobIdOf(raw: string, field = "job_id"): string {
  if (!UUID.test(raw)) throw new ConnectError(`${field} must be a UUID`, Code.InvalidArgument);
  return raw.toLowerCase();
}

/** The refusal a failed `checkReport` describes: aborted (409) or failed_precondition. */
export function refusalOf(check: Exclude<ReportCheck, { ok: true }>): ConnectError {
  return new ConnectError(check.reason, check.code === "aborted" ? Code.Aborted : Code.FailedPrecondition);
}

/** A conditional update found the lease gone between the check and the write. */
export function leaseLost(detail: string): ConnectError {
  return new ConnectError(`${LEASE_LOST} (${detail})`, Code.Aborted);
}

/** Runs a validation from ./spec.ts and turns its JobSpecError into invalid_argument. */
export function validating<T>(check: () => T): T {
  try {
    return check();
  } catch (err) {
    if (err instanceof JobSpecError) throw new ConnectError(err.message, Code.InvalidArgument);
    throw err;
  }
}
