// Receipts of finished destructive jobs (runtime.unload.v1, deployment.drain.v1,
// deployment.unload.v1). A lease replayed after a network failure (the server never heard the
// outcome, so it leased the job again) gets the recorded outcome re-sent instead of the work done
// twice. Kept in a file beside the agent's state file, written atomically with mode 0600, so
// receipts survive agent restarts. A receipt is written before the outcome is reported.
import { dirname, join } from "node:path";
import type { JsonValue } from "@bufbuild/protobuf";
import { ensurePrivateDir, readIfExists, writeFileAtomic } from "../../common/files.js";

export interface Receipt {
  jobId: string;
  capability: string;
  /** The attempt that did the work. */
  attempt: number;
  /** ISO time the work finished, by the agent's clock. */
  finishedAt: string;
  /** jobs.v1.JobResult as protobuf JSON, when it succeeded. */
  result?: JsonValue;
  /** jobs.v1.JobFailure as protobuf JSON, when it failed for good. */
  failure?: JsonValue;
}

interface ReceiptFile {
  version: 1;
  receipts: Receipt[];
}

/** Most receipts kept; the oldest are dropped first (a replay comes within minutes, not months). */
export const MAX_RECEIPTS = 1000;

export class ReceiptError extends Error {
  override name = "ReceiptError";
}

/** Where the receipts of the agent whose state file is `statePath` live. */
export function receiptsPathFor(statePath: string): string {
  return join(dirname(statePath), "receipts.json");
}

export class ReceiptStore {
  private writes: Promise<void> = Promise.resolve();

  private constructor(
    readonly path: string,
    private readonly byJob: Map<string, Receipt>,
  ) {}

  /**
   * Loads the receipts at `path` (none yet is fine). A damaged file is an error, not an empty
   * store: forgetting receipts could run a destructive job twice.
   */
  static async open(path: string): Promise<ReceiptStore> {
    const text = await readIfExists(path);
    const byJob = new Map<string, Receipt>();
    if (text !== undefined) {
      let parsed: Partial<ReceiptFile>;
      try {
        parsed = JSON.parse(text) as Partial<ReceiptFile>;
      } catch {
        throw new ReceiptError(`job receipts ${path} are damaged (not JSON); move the file aside only if no destructive job is pending`);
      }
      if (parsed.version !== 1 || !Array.isArray(parsed.receipts))
        throw new ReceiptError(`job receipts ${path} are damaged (fields missing)`);
      for (const r of parsed.receipts) if (typeof r?.jobId === "string") byJob.set(r.jobId, r);
    }
    return new ReceiptStore(path, byJob);
  }

  get(jobId: string): Receipt | undefined {
    return this.byJob.get(jobId);
  }

  get size(): number {
    return this.byJob.size;
  }

  /** Records a receipt and resolves once it is on disk. Writes are serialized; each writes all. */
  record(receipt: Receipt): Promise<void> {
    this.byJob.delete(receipt.jobId);
    this.byJob.set(receipt.jobId, receipt); // Map order: oldest first
    while (this.byJob.size > MAX_RECEIPTS) this.byJob.delete(this.byJob.keys().next().value!);
    const file: ReceiptFile = { version: 1, receipts: [...this.byJob.values()] };
    const write = this.writes.then(async () => {
      await ensurePrivateDir(dirname(this.path));
      await writeFileAtomic(this.path, `${JSON.stringify(file)}\n`, 0o600);
    });
    this.writes = write.catch(() => undefined);
    return write;
  }
}
