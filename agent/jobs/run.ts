// One running attempt of one job, as the runner tracks it: where its reports go, how long its
// lease lasts and when the server last renewed it, and why its work stopped if it did. Times are
// the runner's clock; the lease's expiry is the server's, so only its distance from now is kept.
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { JobLease } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { SessionLink } from "../session/link.js";

/** Used when a lease's expiry cannot be trusted (clock skew): renew often enough for any sane lease. */
const FALLBACK_LEASE_MS = 30_000;
/** A lease longer than this is taken for a clock that is wrong, not a lease. */
const MAX_LEASE_MS = 86_400_000;

export type StopKind = "lost" | "cancelled" | "stopping";

export class Run {
  readonly controller = new AbortController();
  /** Where reports go; replaced when the lease is re-sent on a newer session. */
  link: SessionLink;
  leaseMs: number;
  /** When the server last accepted the lease or its renewal. */
  lastContact: number;
  cancelRequested = false;
  cancelReason = "";
  /** Set once the work stops for a reason other than finishing. */
  stopped: StopKind | undefined;
  /** Resolves when the run is over (reported or given up). */
  readonly finished: Promise<void>;
  private resolveFinished!: () => void;

  constructor(
    readonly lease: JobLease,
    link: SessionLink,
    now: number,
  ) {
    this.link = link;
    this.lastContact = now;
    this.leaseMs = leaseMsOf(lease.expiresAt, now);
    this.finished = new Promise((resolve) => (this.resolveFinished = resolve));
  }
  get jobId(): string {
    return this.lease.jobId;
  }
  get attempt(): number {
    return this.lease.attempt;
  }
  /** The same lease again (re-sent after a reconnect): the work goes on, reporting on `link`. */
  resent(lease: JobLease, link: SessionLink, now: number): void {
    this.link = link;
    this.leaseMs = leaseMsOf(lease.expiresAt, now);
    this.lastContact = now;
  }
  /** The server accepted a renewal at `now`, with the lease's new expiry when it sent one. */
  renewed(now: number, expiresAt: Timestamp | undefined): void {
    this.lastContact = now;
    if (expiresAt === undefined) return;
    const ms = timestampMs(expiresAt) - now;
    if (ms > 0 && ms < MAX_LEASE_MS) this.leaseMs = ms;
  }
  stop(kind: StopKind, reason: Error): void {
    if (this.stopped === undefined || this.stopped === "cancelled") this.stopped = kind;
    if (!this.controller.signal.aborted) this.controller.abort(reason);
  }
  finish(): void {
    this.resolveFinished();
  }
  /** The lease ran out without a renewal the server accepted. */
  leaseEnded(now: number): boolean {
    return now - this.lastContact >= this.leaseMs;
  }
}

function leaseMsOf(expiresAt: Timestamp | undefined, now: number): number {
  if (expiresAt === undefined) return FALLBACK_LEASE_MS;
  const ms = timestampMs(expiresAt) - now;
  return ms > 0 && ms < MAX_LEASE_MS ? ms : FALLBACK_LEASE_MS;
}
