// A deployment runtime's output on the agent: a bounded tail of recent lines, always kept, and
// watches that forward new lines to the server only while someone follows them. Forwarding is
// batched (every `flushMs`), rate-limited per watch, and bounded: what cannot be sent is counted
// in the watch's dropped-line counter, never buffered without limit.
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { LogStream, RuntimeLogLineSchema, type RuntimeLogLine } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";

export interface LogLimits {
  /** Lines kept per runtime for a watcher's tail. */
  tailLines: number;
  /** Longest line; longer ones are cut. */
  lineBytes: number;
  /** Lines a watch forwards per second at most. */
  linesPerSecond: number;
  /** Lines waiting to be forwarded per watch; more are dropped (and counted). */
  pendingLines: number;
}

export const defaultLogLimits: LogLimits = { tailLines: 500, lineBytes: 4096, linesPerSecond: 200, pendingLines: 1000 };

/** Splits a runtime's output into lines and keeps the last few. */
export class LogTail {
  private readonly lines: RuntimeLogLine[] = [];
  private partial: Record<"stdout" | "stderr", string> = { stdout: "", stderr: "" };

  constructor(
    private readonly revision: bigint,
    private readonly limits: LogLimits,
    private readonly now: () => number,
    /** Hears each complete line. */
    private readonly onLine: (line: RuntimeLogLine) => void,
  ) {}

  write(stream: "stdout" | "stderr", chunk: Buffer): void {
    const text = this.partial[stream] + chunk.toString("utf8");
    const parts = text.split("\n");
    this.partial[stream] = parts.pop() ?? "";
    // A runtime that never ends a line still cannot hold unbounded memory here.
    if (this.partial[stream].length > this.limits.lineBytes) {
      parts.push(this.partial[stream]);
      this.partial[stream] = "";
    }
    for (const raw of parts) this.add(stream, raw);
  }

  /** The last `n` lines, oldest first. */
  tail(n: number): RuntimeLogLine[] {
    return n <= 0 ? [] : this.lines.slice(-n);
  }

  private add(stream: "stdout" | "stderr", raw: string): void {
    const text = cleanLine(raw, this.limits.lineBytes);
    const line = create(RuntimeLogLineSchema, {
      stream: stream === "stdout" ? LogStream.STDOUT : LogStream.STDERR,
      text,
      observedAt: timestampFromMs(this.now()),
      revision: this.revision,
    });
    this.lines.push(line);
    if (this.lines.length > this.limits.tailLines) this.lines.shift();
    this.onLine(line);
  }
}

/** A line as the contract allows it: no carriage return or other control characters but tab, cut to `maxBytes`. */
export function cleanLine(raw: string, maxBytes: number): string {
  let text = raw.replace(/[\u0000-\u0008\u000a-\u001f\u007f-\u009f]/g, "");
  if (Buffer.byteLength(text) > maxBytes) {
    text = Buffer.from(text).subarray(0, maxBytes).toString("utf8");
    // A cut inside a character leaves a replacement character; drop it.
    text = text.replace(/\uFFFD$/, "");
  }
  return text.replace(/[\uD800-\uDBFF]$/, "");
}

/** One watch's forwarding state: lines waiting, lines dropped, and its rate budget. */
export class WatchOutbox {
  private pending: RuntimeLogLine[] = [];
  private dropped = 0n;
  private budget: number;
  private budgetAt: number;

  constructor(
    private readonly limits: LogLimits,
    now: number,
  ) {
    this.budget = limits.linesPerSecond;
    this.budgetAt = now;
  }

  add(lines: RuntimeLogLine[]): void {
    for (const line of lines) {
      if (this.pending.length >= this.limits.pendingLines) this.dropped++;
      else this.pending.push(line);
    }
  }

  /** What may go now under the rate limit; undefined when there is nothing to send. */
  take(now: number): { lines: RuntimeLogLine[]; dropped: bigint } | undefined {
    this.budget = Math.min(this.limits.linesPerSecond, this.budget + ((now - this.budgetAt) * this.limits.linesPerSecond) / 1000);
    this.budgetAt = now;
    const n = Math.min(this.pending.length, Math.floor(this.budget), 1000);
    if (n === 0 && this.dropped === 0n) return undefined;
    const lines = this.pending.splice(0, n);
    this.budget -= n;
    const dropped = this.dropped;
    this.dropped = 0n;
    return { lines, dropped };
  }
}
