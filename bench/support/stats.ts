// Small measuring helpers shared by the benchmarks: percentiles, CPU and memory readings.
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";

export interface Summary {
  count: number;
  p50: number;
  p90: number;
  p95: number;
  p99: number;
  max: number;
  mean: number;
}

/** Nearest-rank percentiles of a list of values (milliseconds, usually). */
export function summarize(values: ArrayLike<number>): Summary {
  const sorted = Float64Array.from(values).sort();
  const n = sorted.length;
  const at = (p: number) => (n === 0 ? NaN : sorted[Math.min(n - 1, Math.max(0, Math.ceil((p / 100) * n) - 1))]!);
  let sum = 0;
  for (const v of sorted) sum += v;
  return {
    count: n,
    p50: at(50),
    p90: at(90),
    p95: at(95),
    p99: at(99),
    max: n === 0 ? NaN : sorted[n - 1]!,
    mean: n === 0 ? NaN : sum / n,
  };
}

export function ms(v: number): string {
  return Number.isNaN(v) ? "-" : v < 10 ? v.toFixed(2) : v.toFixed(1);
}

export function kib(bytes: number): string {
  return (bytes / 1024).toFixed(1);
}

export function mib(bytes: number): string {
  return (bytes / 1024 / 1024).toFixed(1);
}

/** Whole-machine CPU time (all cores, jiffies) from /proc/stat: busy and total. */
export function machineCpu(): { busy: number; total: number; steal: number } {
  const line = readFileSync("/proc/stat", "utf8").split("\n")[0]!;
  const f = line.trim().split(/\s+/).slice(1).map(Number);
  const idle = (f[3] ?? 0) + (f[4] ?? 0);
  const total = f.reduce((a, b) => a + b, 0);
  // steal: time the hypervisor ran something else while this VM wanted a CPU (counted in busy).
  return { busy: total - idle, total, steal: f[7] ?? 0 };
}

/**
 * The machine's TCP counters that say a connect waited on a timer: SYNs and SYN-ACKs sent again
 * (Linux counts both in TCPSynRetrans: no answer within the 1 s initial timeout, on the dialing
 * side or the listening one) and listen-queue overflows (a handshake dropped by a full accept
 * queue). Machine-wide, from /proc/net/netstat; zeros where it cannot be read.
 */
export function tcpConnectDelays(): { synRetransmits: number; listenOverflows: number } {
  let text = "";
  try {
    text = readFileSync("/proc/net/netstat", "utf8");
  } catch {
    return { synRetransmits: 0, listenOverflows: 0 };
  }
  const lines = text.split("\n").filter((l) => l.startsWith("TcpExt:"));
  const names = lines[0]?.split(/\s+/) ?? [];
  const values = lines[1]?.split(/\s+/) ?? [];
  const of = (name: string) => Number(values[names.indexOf(name)] ?? 0) || 0;
  return { synRetransmits: of("TCPSynRetrans"), listenOverflows: of("ListenOverflows") };
}

/** The machine's CPU in slices: readings of /proc/stat every `intervalMs` until stopped. */
export function sampleMachine(intervalMs: number): { stop(): { at: number; busy: number; steal: number }[] } {
  const slices: { at: number; busy: number; steal: number }[] = [];
  let last = machineCpu();
  const timer = setInterval(() => {
    const now = machineCpu();
    const total = Math.max(1, now.total - last.total);
    slices.push({ at: Date.now() - intervalMs, busy: (now.busy - last.busy) / total, steal: (now.steal - last.steal) / total });
    last = now;
  }, intervalMs);
  return {
    stop() {
      clearInterval(timer);
      return slices;
    },
  };
}

/**
 * Cores' worth of the whole machine between two machineCpu() readings: in use (busy), or given by
 * the hypervisor to others while this VM wanted them (steal).
 */
export function machineCores(
  a: { busy: number; steal: number; total: number },
  b: { busy: number; steal: number; total: number },
  cores: number,
  of: "busy" | "steal" = "busy",
): number {
  return ((b[of] - a[of]) / Math.max(1, b.total - a.total)) * cores;
}

/** Cores a process used between two process.cpuUsage() readings taken `wallMs` apart. */
export function coresUsed(a: NodeJS.CpuUsage, b: NodeJS.CpuUsage, wallMs: number): number {
  return (b.user - a.user + b.system - a.system) / 1000 / wallMs;
}

/** Fields of /proc/self/status in bytes (VmRSS, RssAnon, RssFile, VmHWM). */
export function procStatus(pid: number | "self" = "self"): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of readFileSync(`/proc/${pid}/status`, "utf8").split("\n")) {
    const m = /^(VmRSS|RssAnon|RssFile|RssShmem|VmHWM):\s+(\d+) kB/.exec(line);
    if (m) out[m[1]!] = Number(m[2]) * 1024;
  }
  return out;
}

export const sleep = (msDelay: number) => new Promise<void>((r) => setTimeout(r, msDelay));

/** Reads `name` from --name=value on the command line, then the NAME environment variable. */
export function param(name: string, fallback: string): string {
  const flag = `--${name.toLowerCase().replace(/_/g, "-")}=`;
  const arg = process.argv.find((a) => a.startsWith(flag));
  if (arg !== undefined) return arg.slice(flag.length);
  const v = process.env[name];
  return v === undefined || v.trim() === "" ? fallback : v.trim();
}

export function numParam(name: string, fallback: number): number {
  const raw = param(name, String(fallback));
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name}: expected a non-negative number, got "${raw}"`);
  return n;
}

/** Values grouped by when they started, in slices of `sliceMs` from `fromMs`: where a tail sits in time. */
export function bySlice(startedAt: ArrayLike<number>, values: ArrayLike<number>, fromMs: number, sliceMs: number): number[][] {
  const groups: number[][] = [];
  for (let i = 0; i < values.length; i++) {
    const slice = Math.max(0, Math.floor((startedAt[i]! - fromMs) / sliceMs));
    const group = groups[slice] ?? [];
    group.push(values[i]!);
    groups[slice] = group;
  }
  return Array.from(groups, (g) => g ?? []);
}

/**
 * The machine's speed as README.md records it: one RSA-2048 signature's time in ms from
 * `openssl speed -seconds N rsa2048`, or NaN when openssl is missing or says something else.
 */
export function rsaSignMs(seconds = 3): Promise<number> {
  return new Promise((resolve) => {
    execFile("openssl", ["speed", "-seconds", String(seconds), "rsa2048"], { timeout: 60_000 }, (err, stdout) => {
      const m = /rsa\s+2048 bits\s+([\d.]+)s/.exec(err ? "" : stdout);
      resolve(m ? Number(m[1]) * 1000 : Number.NaN);
    });
  });
}

/** CPU time (user + system) a process has used so far, ms, from /proc/<pid>/stat (10 ms ticks); NaN once it is gone. */
export function processCpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) * 10; // utime + stime, in USER_HZ (100 on Linux)
  } catch {
    return Number.NaN;
  }
}

/**
 * Write system calls a process has made so far (syscw in /proc/<pid>/io); NaN where there is none.
 * A count, not a time: it does not move with the machine's load, so a change to what crosses the
 * processes shows in it when the latencies are lost in a busy machine's noise.
 */
export function processWrites(pid: number): number {
  try {
    const io = readFileSync(`/proc/${pid}/io`, "utf8");
    return Number(/^syscw: (\d+)$/m.exec(io)?.[1] ?? Number.NaN);
  } catch {
    return Number.NaN;
  }
}
