// Running nvidia-smi and parsing its CSV output.
//
// We call nvidia-smi ourselves (instead of systeminformation's graphics()) so that a failed
// collection can be told apart from "this node has no NVIDIA GPUs": systeminformation looks for the
// binary in fixed locations and swallows every error. The parsers are pure functions so they can be
// tested without a GPU; the runner looks the binary up on PATH so tests can put a fake in front.

import { execFile, type ExecFileException } from "node:child_process";
import { constants } from "node:fs";
import { access } from "node:fs/promises";
import { delimiter, resolve as resolvePath } from "node:path";

/** How long one nvidia-smi invocation may take before it is killed. */
export const DEFAULT_NVIDIA_SMI_TIMEOUT_MS = 10_000;

/** The command run; looked up on PATH. */
export const NVIDIA_SMI_COMMAND = "nvidia-smi";

/** Fields queried for the inventory, in output order. */
export const NVIDIA_SMI_INVENTORY_FIELDS = ["uuid", "index", "pci.bus_id", "name", "memory.total", "driver_version"] as const;

/** Fields queried for telemetry, in output order. */
export const NVIDIA_SMI_TELEMETRY_FIELDS = ["uuid", "utilization.gpu", "memory.used", "temperature.gpu", "power.draw"] as const;

export const NVIDIA_SMI_INVENTORY_ARGS: readonly string[] = [
  `--query-gpu=${NVIDIA_SMI_INVENTORY_FIELDS.join(",")}`,
  "--format=csv,noheader,nounits",
];

export const NVIDIA_SMI_TELEMETRY_ARGS: readonly string[] = [
  `--query-gpu=${NVIDIA_SMI_TELEMETRY_FIELDS.join(",")}`,
  "--format=csv,noheader,nounits",
];

/** GPU memory per compute process (one row per process and GPU), for a runtime's evidence. */
export const NVIDIA_SMI_COMPUTE_APPS_ARGS: readonly string[] = ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"];

const MIB = 1024n * 1024n;
/** Longest error text we ever produce; stderr of a sick driver can be long. */
const MAX_ERROR_CHARS = 300;
/** Upper bound on nvidia-smi output we are willing to buffer. */
const MAX_OUTPUT_BYTES = 1024 * 1024;

/** One GPU as the inventory query reports it. */
export interface NvidiaSmiInventoryRow {
  uuid: string;
  index: number;
  pciBusId: string;
  name: string;
  memoryTotalBytes: bigint;
  driverVersion: string;
}

/** One GPU as the telemetry query reports it. Unavailable values are 0. */
export interface NvidiaSmiTelemetryRow {
  uuid: string;
  utilizationPercent: number;
  memoryUsedBytes: bigint;
  temperatureCelsius: number;
  powerWatts: number;
}

/**
 * nvidia-smi printed something that is not a row of the expected shape. `rows` holds every line
 * that did parse, so a caller can still use them; `lineNumber` (1-based) and `line` identify the
 * first line that did not.
 */
export class NvidiaSmiParseError<Row> extends Error {
  override readonly name = "NvidiaSmiParseError";
  constructor(
    readonly lineNumber: number,
    readonly line: string,
    readonly reason: string,
    readonly rows: Row[],
  ) {
    super(`nvidia-smi output line ${lineNumber}: ${reason}: ${quote(line)}`);
  }
}

/** Parses the output of the inventory query. Throws NvidiaSmiParseError on any malformed line. */
export function parseNvidiaSmiInventory(csv: string): NvidiaSmiInventoryRow[] {
  return parseLines(csv, NVIDIA_SMI_INVENTORY_FIELDS.length, (f) => {
    const [uuid, index, pciBusId, name, memoryTotal, driverVersion] = f as [string, string, string, string, string, string];
    return {
      uuid: parseUuid(uuid),
      index: parseIndex(index),
      pciBusId: textOrEmpty(pciBusId),
      name: textOrEmpty(name),
      memoryTotalBytes: mibToBytes(memoryTotal, "memory.total"),
      driverVersion: textOrEmpty(driverVersion),
    };
  });
}

/** Parses the output of the telemetry query. Throws NvidiaSmiParseError on any malformed line. */
export function parseNvidiaSmiTelemetry(csv: string): NvidiaSmiTelemetryRow[] {
  return parseLines(csv, NVIDIA_SMI_TELEMETRY_FIELDS.length, (f) => {
    const [uuid, utilization, memoryUsed, temperature, power] = f as [string, string, string, string, string];
    return {
      uuid: parseUuid(uuid),
      utilizationPercent: numberOrZero(utilization, "utilization.gpu"),
      memoryUsedBytes: mibToBytes(memoryUsed, "memory.used"),
      temperatureCelsius: numberOrZero(temperature, "temperature.gpu"),
      powerWatts: numberOrZero(power, "power.draw"),
    };
  });
}

/** One compute process on one GPU. */
export interface NvidiaSmiComputeApp {
  pid: number;
  usedMemoryBytes: bigint;
}

/**
 * Parses the output of the compute-apps query. A process using several GPUs has a row for each,
 * so pids repeat. Throws NvidiaSmiParseError on any malformed line.
 */
export function parseNvidiaSmiComputeApps(csv: string): NvidiaSmiComputeApp[] {
  const rows: NvidiaSmiComputeApp[] = [];
  csv.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === "") return;
    const fields = line.split(",").map((s) => s.trim());
    let reason = `expected 2 fields, got ${fields.length}`;
    if (fields.length === 2) {
      try {
        rows.push({ pid: parseIndex(fields[0]!), usedMemoryBytes: mibToBytes(fields[1]!, "used_memory") });
        return;
      } catch (err) {
        if (!(err instanceof FieldError)) throw err;
        reason = err.message;
      }
    }
    throw new NvidiaSmiParseError(i + 1, line, reason, rows);
  });
  return rows;
}

/** A field-level problem; turned into an NvidiaSmiParseError with the line attached. */
class FieldError extends Error {}

function parseLines<Row extends { uuid: string }>(csv: string, fieldCount: number, toRow: (fields: string[]) => Row): Row[] {
  const rows: Row[] = [];
  const seen = new Set<string>();
  let firstError: { lineNumber: number; line: string; reason: string } | undefined;
  csv.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === "") return;
    const fields = line.split(",").map((s) => s.trim());
    let reason: string;
    if (fields.length !== fieldCount) {
      reason = `expected ${fieldCount} fields, got ${fields.length}`;
    } else {
      try {
        const row = toRow(fields);
        if (!seen.has(row.uuid)) {
          seen.add(row.uuid);
          rows.push(row);
          return;
        }
        reason = `duplicate uuid ${row.uuid}`;
      } catch (err) {
        if (!(err instanceof FieldError)) throw err;
        reason = err.message;
      }
    }
    firstError ??= { lineNumber: i + 1, line, reason };
  });
  if (firstError) {
    throw new NvidiaSmiParseError(firstError.lineNumber, firstError.line, firstError.reason, rows);
  }
  return rows;
}

/** nvidia-smi's spellings of "no value": "[N/A]", "[Not Supported]", "[Unknown Error]", ... */
function isUnavailable(value: string): boolean {
  return value === "" || /^\[.*\]$/.test(value) || value === "N/A";
}

function parseUuid(value: string): string {
  if (isUnavailable(value) || /\s/.test(value)) throw new FieldError(`invalid uuid`);
  return value;
}

function parseIndex(value: string): number {
  if (!/^\d+$/.test(value)) throw new FieldError(`invalid index`);
  return Number(value);
}

function textOrEmpty(value: string): string {
  return isUnavailable(value) ? "" : value;
}

function numberOrZero(value: string, field: string): number {
  if (isUnavailable(value)) return 0;
  // Number("") and Number(" ") are 0, and "0x10" is 16: check the shape first.
  if (!/^[+-]?(\d+\.?\d*|\.\d+)$/.test(value)) throw new FieldError(`invalid ${field}`);
  return Number(value);
}

function mibToBytes(value: string, field: string): bigint {
  const mib = numberOrZero(value, field);
  if (mib < 0) throw new FieldError(`invalid ${field}`);
  // memory values are whole MiB in practice; be exact for those and round otherwise.
  return Number.isInteger(mib) ? BigInt(mib) * MIB : BigInt(Math.round(mib * 1024 * 1024));
}

function quote(line: string): string {
  return JSON.stringify(truncate(line, 120));
}

export function truncate(text: string, max = MAX_ERROR_CHARS): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

function firstLine(text: string): string {
  for (const line of text.split(/\r?\n/)) {
    const t = line.trim();
    if (t !== "") return t;
  }
  return "";
}

/** The outcome of one nvidia-smi invocation. */
export type NvidiaSmiRun =
  /** The binary is not on PATH: a node without NVIDIA GPUs (or without the driver). */
  | { kind: "not-found" }
  /** Exit status 0. */
  | { kind: "ok"; stdout: string }
  /**
   * Non-zero exit, killed, timed out, or could not be started. `error` is a short human-readable
   * reason; `stdout` holds the complete lines printed before it failed (possibly some good rows).
   */
  | { kind: "failed"; error: string; stdout: string };

export interface RunNvidiaSmiOptions {
  /** Kill nvidia-smi after this many milliseconds. Default DEFAULT_NVIDIA_SMI_TIMEOUT_MS. */
  timeoutMs?: number;
  /** Command to run, looked up on PATH unless it contains a slash. Default "nvidia-smi". */
  command?: string;
}

/**
 * Where a spawn of `command` would find it: `command` itself when it names a path or PATH is
 * unset (the spawn decides), the first PATH directory holding it executable, else undefined.
 * Looked up with async access(2) because a CPU-only node asks every telemetry round, and a spawn
 * that fails to find the binary still forks the agent, on its event loop.
 */
export async function findOnPath(command: string, pathVar: string | undefined): Promise<string | undefined> {
  if (command.includes("/") || pathVar === undefined) return command;
  for (const dir of pathVar.split(delimiter)) {
    const candidate = resolvePath(dir === "" ? "." : dir, command);
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // Not here: the next directory.
    }
  }
  return undefined;
}

/** Runs nvidia-smi with `args`. Never rejects. */
export async function runNvidiaSmi(args: readonly string[], options: RunNvidiaSmiOptions = {}): Promise<NvidiaSmiRun> {
  const command = options.command ?? NVIDIA_SMI_COMMAND;
  const timeoutMs = options.timeoutMs ?? DEFAULT_NVIDIA_SMI_TIMEOUT_MS;
  const found = await findOnPath(command, process.env.PATH);
  if (found === undefined) return { kind: "not-found" };
  return new Promise((resolve) => {
    let child: ReturnType<typeof execFile>;
    try {
      child = execFile(
        found,
        [...args],
        {
          encoding: "utf8",
          timeout: timeoutMs,
          killSignal: "SIGKILL",
          maxBuffer: MAX_OUTPUT_BYTES,
          windowsHide: true,
        },
        (error, stdout, stderr) => resolve(classify(command, timeoutMs, error, stdout, stderr)),
      );
    } catch (err) {
      // Synchronous spawn failures (e.g. invalid arguments) are rare; treat them as failures.
      resolve({ kind: "failed", error: truncate(`could not run ${command}: ${String(err)}`), stdout: "" });
      return;
    }
    // execFile reports only once every stdio stream has closed. If the process we started has
    // exited (or was killed on timeout) but a descendant still holds its stdout open, that could
    // take forever; stop waiting shortly after the exit.
    child.once("exit", () => {
      setTimeout(() => {
        child.stdout?.destroy();
        child.stderr?.destroy();
      }, 500).unref();
    });
  });
}

function classify(command: string, timeoutMs: number, error: ExecFileException | null, stdout: string, stderr: string): NvidiaSmiRun {
  if (!error) return { kind: "ok", stdout };
  if (error.code === "ENOENT") return { kind: "not-found" };
  const completeLines = stdout.slice(0, stdout.lastIndexOf("\n") + 1);
  // The reason nvidia-smi gives is on stderr, or, for some errors, on stdout among the rows.
  const detail = firstLine(stderr) || (typeof error.code === "number" ? firstNonRowLine(stdout) : "");
  let reason: string;
  if (error.code === "ERR_CHILD_PROCESS_STDIO_MAXBUFFER") {
    reason = `${command} printed more than ${MAX_OUTPUT_BYTES} bytes`;
  } else if (error.killed) {
    reason = `${command} timed out after ${timeoutMs} ms`;
  } else if (typeof error.code === "number") {
    reason = `${command} exited with code ${error.code}`;
  } else if (error.signal) {
    reason = `${command} was killed by ${error.signal}`;
  } else if (typeof error.code === "string") {
    reason = `could not run ${command}: ${error.code}`;
  } else {
    reason = `${command} failed: ${firstLine(error.message)}`;
  }
  return {
    kind: "failed",
    error: truncate(detail ? `${reason}: ${detail}` : reason),
    stdout: completeLines,
  };
}

/**
 * nvidia-smi prints many of its errors ("No devices were found", "NVIDIA-SMI has failed because
 * ...") on stdout, mixed with any good rows. Pick the first line that is not a CSV row.
 */
function firstNonRowLine(stdout: string): string {
  for (const line of stdout.split(/\r?\n/)) {
    const t = line.trim();
    if (t !== "" && !t.includes(",")) return t;
  }
  return "";
}
