// The agent's capability registry: capability name -> handler. The agent advertises exactly the
// registered names in its Hello, and a lease for any other kind is failed at once with
// UNSUPPORTED_CAPABILITY (see ./runner.ts). Handlers are typed: each gets the JobSpec and returns
// the JobResult case of its capability; nothing here runs a command line.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { allCapabilities, isKnownCapability } from "../../common/capabilities.js";
import type { JobFailureCode, JobResultSchema, JobSpec } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";

/** A progress update from a handler; every field optional. */
export interface ProgressUpdate {
  /** 0-100. */
  percent?: number;
  bytesDone?: bigint;
  bytesTotal?: bigint;
  /** A short status line (at most 256 bytes of UTF-8; the server refuses longer). */
  message?: string;
}

/** What a handler is given for one attempt of one job. */
export interface JobAttempt {
  readonly jobId: string;
  readonly attempt: number;
  /**
   * Aborted when the work must stop: cancellation (reason a JobCancelled), a lost lease (reason a
   * LeaseLost) or agent shutdown. A handler should stop promptly and may simply throw.
   */
  readonly signal: AbortSignal;
  /**
   * Reports progress (which also renews the lease). Resolves with whether an operator asked to
   * cancel; rejects when the server refuses the progress (e.g. oversized) or the lease is lost.
   */
  progress(update: ProgressUpdate): Promise<{ cancelRequested: boolean }>;
}

export type JobHandlerResult = MessageInitShape<typeof JobResultSchema>;
export type JobHandler = (spec: JobSpec, ctx: JobAttempt) => Promise<JobHandlerResult>;

/** A typed failure a handler throws; anything else thrown becomes a retryable INTERNAL failure. */
export class JobFailureError extends Error {
  override readonly name = "JobFailureError";
  constructor(
    readonly code: JobFailureCode,
    message: string,
    readonly retryable = false,
  ) {
    super(message);
  }
}

/** Capabilities whose finished jobs leave a receipt, so a replayed lease is not run twice. */
export const DESTRUCTIVE_CAPABILITIES: ReadonlySet<string> = new Set(["runtime.unload.v1", "deployment.drain.v1", "deployment.unload.v1"]);

export function isDestructive(capability: string): boolean {
  return DESTRUCTIVE_CAPABILITIES.has(capability);
}

export class CapabilityRegistry {
  private readonly handlers = new Map<string, JobHandler>();
  /** The runtime engines the runtime capabilities can start, advertised beside the capabilities. */
  engines: readonly string[] = [];
  /** The engines among them whose runtimes serve embeddings. */
  embeddingEngines: readonly string[] = [];

  /** Registers the handler of one capability of the contract (e.g. "deployment.drain.v1"). */
  register(capability: string, handler: JobHandler): this {
    if (!isKnownCapability(capability)) {
      throw new Error(`"${capability}" is not a capability of the contract (known: ${allCapabilities.join(", ")})`);
    }
    if (this.handlers.has(capability)) throw new Error(`capability "${capability}" already has a handler`);
    this.handlers.set(capability, handler);
    return this;
  }

  get(capability: string): JobHandler | undefined {
    return this.handlers.get(capability);
  }

  /** The registered capabilities, in the contract's order: what the agent advertises. */
  names(): string[] {
    return allCapabilities.filter((c) => this.handlers.has(c));
  }
}
