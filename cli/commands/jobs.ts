// forge jobs create | list | get | cancel | watch
import { readFileSync } from "node:fs";
import { create, equals, fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  CancelJobResponseSchema,
  CreateJobResponseSchema,
  GetJobResponseSchema,
  JobSchema,
  JobState,
  ListJobsResponseSchema,
  type Job,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import {
  JobFailureCode,
  JobResultSchema,
  JobSpecSchema,
  type JobResult,
  type JobSpec,
} from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { capabilityOfSpec, capabilityOfSpecCase, type JobSpecCase } from "../../common/capabilities.js";
import {
  command,
  idArg,
  intOption,
  parseJobStates,
  textOption,
  UsageError,
  validEnumNames,
  valueOption,
  type Context,
  type Group,
} from "../args.js";
import { clean, dateOf, enumName, fields, formatAge, formatPercent, formatTimeAndAge, progressLine, table } from "../format.js";
import { printJsonLine, printReply } from "../output.js";
import { pagedListCommand } from "../list.js";
import { systemClock } from "../../common/clock.js";

/** A problem with the spec file's content or access: exit 2, without the usage hint. */
export class SpecFileError extends UsageError {
  override name = "SpecFileError";
}

/** The largest spec file read; a job spec is small. */
const maxSpecBytes = 1024 * 1024;
const pollIntervalMs = 500;

const specCases = (): string[] => {
  const kind = JobSpecSchema.oneofs.find((o) => o.name === "kind");
  return (kind?.fields ?? []).map((f) => `${f.jsonName} (${capabilityOfSpecCase(f.localName as JobSpecCase)})`);
};

/**
 * Reads a modelforge.jobs.v1.JobSpec in protobuf JSON form from `file` ("-" is stdin). Every
 * problem is a UsageError naming the file.
 */
export function loadJobSpec(file: string, read: (file: string) => Buffer = (f) => readFileSync(f === "-" ? 0 : f)): JobSpec {
  const name = file === "-" ? "<stdin>" : file;
  if (/\.ya?ml$/i.test(file)) {
    throw new SpecFileError(
      `${name}: YAML is not supported; write the job spec as JSON (protobuf JSON form of modelforge.jobs.v1.JobSpec)`,
    );
  }
  let bytes: Buffer;
  try {
    bytes = read(file);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new SpecFileError(`${name}: cannot read the job spec (${e.code ?? e.message})`);
  }
  if (bytes.length > maxSpecBytes) throw new SpecFileError(`${name}: the job spec is larger than ${maxSpecBytes} bytes`);
  let json: JsonValue;
  try {
    json = JSON.parse(bytes.toString("utf8")) as JsonValue;
  } catch (err) {
    throw new SpecFileError(`${name}: not valid JSON: ${(err as Error).message}`);
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) {
    throw new SpecFileError(`${name}: expected a JSON object holding a modelforge.jobs.v1.JobSpec, e.g. {"artifactAcquire": {...}}`);
  }
  let spec: JobSpec;
  try {
    spec = fromJson(JobSpecSchema, json);
  } catch (err) {
    throw new SpecFileError(`${name}: not a valid modelforge.jobs.v1.JobSpec: ${(err as Error).message}`);
  }
  if (spec.kind.case === undefined) {
    throw new SpecFileError(`${name}: the job spec sets no capability; set exactly one of: ${specCases().join(", ")}`);
  }
  return spec;
}

/** Protobuf JSON of a spec or result with request/response payload bytes replaced by their size. */
function withoutPayloads(json: JsonValue, msg: JobSpec | JobResult): JsonValue {
  const obj = json as Record<string, Record<string, JsonValue>>;
  const kind = "kind" in msg ? msg.kind : msg.result;
  if (kind.case === "deploymentInvoke" && obj.deploymentInvoke?.payload !== undefined) {
    obj.deploymentInvoke.payload = `<${kind.value.payload.length} bytes, not shown>`;
  }
  return obj;
}

const stateName = (s: JobState) => enumName(JobState, s);
const terminal = (s: JobState) => s === JobState.SUCCEEDED || s === JobState.FAILED || s === JobState.CANCELLED;

/** The job list table. Pure. */
export function renderJobTable(jobs: Job[], now: Date): string {
  return table(
    ["ID", "NODE", "CAPABILITY", "STATE", "ATTEMPT", "PROGRESS", "ORDERING KEY", "UPDATED"],
    jobs.map((j) => [
      j.id,
      j.nodeId,
      j.capability || "-",
      stateName(j.state) + (j.cancelRequested && !terminal(j.state) ? " (cancelling)" : ""),
      `${j.attempt}/${j.maxAttempts}`,
      j.progress ? formatPercent(j.progress.percent) : "-",
      j.orderingKey || "-",
      formatAge(dateOf(j.updatedAt), now),
    ]),
  );
}

/** `jobs get`: the job in readable sections. Pure. */
export function renderJobDetail(j: Job, now: Date): string {
  const out: string[] = [
    "Job\n" +
      fields([
        ["ID", j.id],
        ["Node", j.nodeId],
        ["Capability", j.capability || "-"],
        ["State", stateName(j.state) + (j.cancelRequested && !terminal(j.state) ? " (cancellation requested)" : "")],
        ["Ordering key", j.orderingKey || "-"],
        ["Attempt", `${j.attempt} of ${j.maxAttempts}`],
        ["Lease expires", j.leaseExpiresAt ? formatTimeAndAge(dateOf(j.leaseExpiresAt), now) : undefined],
        ["Created", formatTimeAndAge(dateOf(j.createdAt), now)],
        ["Updated", formatTimeAndAge(dateOf(j.updatedAt), now)],
        ["Finished", j.finishedAt ? formatTimeAndAge(dateOf(j.finishedAt), now) : undefined],
      ]),
  ];
  if (j.progress) out.push(`Progress\n  ${progressLine(j.progress)}\n`);
  if (j.failure) {
    out.push(
      "Failure\n" +
        fields([
          ["Code", enumName(JobFailureCode, j.failure.code)],
          ["Message", j.failure.message || "-"],
          ["Retryable", j.failure.retryable ? "yes" : "no"],
        ]),
    );
  }
  if (j.result && j.result.result.case !== undefined) {
    const json = withoutPayloads(toJson(JobResultSchema, j.result), j.result);
    out.push(`Result\n${indentJson(json)}`);
  }
  if (j.spec) out.push(`Spec\n${indentJson(withoutPayloads(toJson(JobSpecSchema, j.spec), j.spec))}`);
  return out.join("\n");
}

function indentJson(json: JsonValue): string {
  return `${JSON.stringify(json, null, 2)
    .split("\n")
    .map((l) => `  ${clean(l)}`)
    .join("\n")}\n`;
}

/** One status line for `jobs watch`. Pure. */
export function watchLine(j: Job): string {
  const head = `${stateName(j.state)}${j.cancelRequested && !terminal(j.state) ? " (cancelling)" : ""}  attempt ${j.attempt}/${j.maxAttempts}`;
  return j.progress ? `${head}  ${progressLine(j.progress)}` : head;
}

/** The last line of `jobs watch`: how the job ended. Pure. */
export function outcomeLine(j: Job): string {
  switch (j.state) {
    case JobState.SUCCEEDED:
      return `Job ${j.id} succeeded.`;
    case JobState.FAILED:
      return (
        `Job ${j.id} failed` +
        (j.failure ? `: ${enumName(JobFailureCode, j.failure.code)}${j.failure.message ? `: ${clean(j.failure.message)}` : ""}` : ".")
      );
    case JobState.CANCELLED:
      return `Job ${j.id} was cancelled.`;
    default:
      return `Job ${j.id} is ${stateName(j.state)}.`;
  }
}

const createCommand = command("create", "Create a typed job for one node from a JSON job spec", {
  options: {
    node: valueOption("NODE_ID", "the node to run it on (required)"),
    spec: valueOption(
      "FILE",
      'a modelforge.jobs.v1.JobSpec in protobuf JSON form, e.g. {"artifactAcquire": {...}}; "-" reads stdin (required)',
    ),
    "ordering-key": valueOption("KEY", "jobs with the same key run one at a time, in creation order"),
    "max-attempts": valueOption("N", "the most attempts (server default 5)"),
  },
  notes: "The spec file must be JSON; YAML is not supported.",
  async run(ctx, values) {
    const node = values.node as string | undefined;
    const file = values.spec as string | undefined;
    if (!node) throw new UsageError("missing --node");
    if (!file) throw new UsageError("missing --spec");
    const maxAttempts = intOption(values, "max-attempts", 1, 1000, 0);
    const spec = loadJobSpec(file);
    const res = await ctx.client().createJob({
      nodeId: node,
      spec,
      orderingKey: textOption(values, "ordering-key"),
      maxAttempts,
    });
    return printReply(
      ctx,
      CreateJobResponseSchema,
      res,
      ({ job: j }) =>
        `Created job ${j?.id ?? "?"} (${j?.capability || capabilityOfSpec(spec)}) on node ${node}: ${j ? stateName(j.state) : "unknown"}.\n` +
        (j ? `Follow it with: forge jobs watch ${j.id}\n` : ""),
    );
  },
});

const listCommand = pagedListCommand("List jobs, newest first", {
  options: {
    node: valueOption("NODE_ID", "only this node's jobs"),
    state: valueOption("STATES", `only these states, comma-separated: ${validEnumNames(JobState).join(",")}`),
    "ordering-key": valueOption("KEY", "only jobs with this ordering key"),
  },
  filter: (values) => ({
    nodeId: textOption(values, "node"),
    states: parseJobStates(values.state as string | undefined),
    orderingKey: textOption(values, "ordering-key"),
  }),
  schema: ListJobsResponseSchema,
  fetch: (client, page, filter) => client.listJobs({ ...filter, ...page }),
  empty: "No jobs.\n",
  table: renderJobTable,
});

const getCommand = command("get ID", "Show one job: state, progress, failure or result, spec", {
  async run(ctx, _values, positionals) {
    const res = await ctx.client().getJob({ jobId: idArg(positionals, "job ID") });
    return printReply(ctx, GetJobResponseSchema, res, ({ job }) => (job ? renderJobDetail(job, ctx.now()) : ""));
  },
});

const cancelCommand = command("cancel ID", "Request cancellation of a job", {
  options: { reason: valueOption("TEXT", "why") },
  async run(ctx, values, positionals) {
    const id = idArg(positionals, "job ID");
    const res = await ctx.client().cancelJob({ jobId: id, reason: textOption(values, "reason") });
    return printReply(ctx, CancelJobResponseSchema, res, ({ job }) =>
      job && terminal(job.state) ? `Job ${id} had already ended: ${stateName(job.state)}.\n` : `Cancellation of job ${id} requested.\n`,
    );
  },
});

/** Errors worth riding out while polling: the server restarting or a slow answer. */
const transient = (err: unknown) => err instanceof ConnectError && (err.code === Code.Unavailable || err.code === Code.DeadlineExceeded);

async function watchJob(ctx: Context, id: string): Promise<number> {
  const client = ctx.client();
  const tty = ctx.stdoutIsTTY && !ctx.json;
  let last: Job | undefined;
  let lastLine = "";
  let failures = 0;
  const clearLine = () => {
    if (tty && lastLine !== "") ctx.out("\r\x1b[2K");
  };
  for (;;) {
    let job: Job | undefined;
    try {
      job = (await client.getJob({ jobId: id }, { signal: ctx.signal })).job;
      failures = 0;
    } catch (err) {
      if (ctx.signal.aborted) break;
      if (transient(err) && ++failures < 20) {
        await systemClock.sleep(pollIntervalMs, ctx.signal);
        continue;
      }
      clearLine();
      throw err;
    }
    if (job === undefined) throw new ConnectError(`job ${id}: the server returned no job`, Code.Internal);
    if (ctx.json) {
      if (last === undefined || !equals(JobSchema, last, job))
        printJsonLine(ctx, GetJobResponseSchema, create(GetJobResponseSchema, { job }));
    } else {
      const line = watchLine(job);
      if (tty) {
        if (line !== lastLine) {
          // Stay on one row: cut the line to the terminal's width (unknown width: 100).
          const width = ctx.columns !== undefined && ctx.columns > 0 ? Math.max(20, ctx.columns - 1) : 100;
          ctx.out(`\r\x1b[2K${[...line].slice(0, width).join("")}`);
          lastLine = line;
        }
      } else if (line !== lastLine) {
        ctx.out(`${line}\n`);
        lastLine = line;
      }
    }
    last = job;
    if (terminal(job.state)) {
      if (!ctx.json) {
        if (tty) ctx.out("\n");
        ctx.out(`${outcomeLine(job)}\n`);
      }
      return job.state === JobState.SUCCEEDED ? 0 : 1;
    }
    await systemClock.sleep(pollIntervalMs, ctx.signal);
    if (ctx.signal.aborted) break;
  }
  if (tty && lastLine !== "") ctx.out("\n");
  ctx.err(`Stopped watching job ${id}; the job itself goes on.\n`);
  return 1;
}

const watchCommand = command("watch ID", "Follow a job until it ends (exit 0 if it succeeded, 1 otherwise)", {
  notes:
    "Polls every 500 ms. On a terminal it draws one progress line; otherwise it prints a line per\n" +
    "change. With --json each change is one JSON document on its own line (NDJSON).",
  interruptible: true,
  async run(ctx, _values, positionals) {
    return watchJob(ctx, idArg(positionals, "job ID"));
  },
});

export const jobsGroup: Group = {
  name: "jobs",
  summary: "Typed jobs that nodes run",
  topic: "jobs",
  commands: [createCommand, listCommand, getCommand, cancelCommand, watchCommand],
};
