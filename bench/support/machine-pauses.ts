// The machine's own pauses: one process per core spins on the monotonic clock and records every gap
// between two of its reads. With nothing else running, a gap is time the core was taken from a
// process that wanted it: by the kernel, another process, or the hypervisor (a VM whose host does
// not report steal time shows it only this way). A tail-latency figure on the same machine cannot
// be smaller than the pauses a busy core sees, so the benches print them as a floor of the run.
import { execFile, spawnSync } from "node:child_process";

export interface MachinePauses {
  seconds: number;
  /** Per core: gaps of at least `thresholdMs`, and the longest gap seen. */
  cores: { pauses: number; longestMs: number }[];
  /** Gaps that began within 2 ms of a gap on another core: the whole machine stopped, not one core. */
  together: number;
  thresholdMs: number;
}

// Runs in the child: spin, and print each gap over the threshold as "start-µs:length-µs".
const spinner = `
const [seconds, threshold] = process.argv.slice(1).map(Number);
const end = process.hrtime.bigint() + BigInt(seconds * 1e9);
const gaps = [];
let last = process.hrtime.bigint();
for (;;) {
  const now = process.hrtime.bigint();
  if (now >= end) break;
  if (now - last >= BigInt(threshold * 1e6)) gaps.push((last / 1000n) + ":" + ((now - last) / 1000n));
  last = now;
}
process.stdout.write(gaps.join(" "));`;

const hasTaskset = spawnSync("taskset", ["--version"]).status === 0;

/** Spins one process per core for `seconds` (pinned where taskset exists) and counts the gaps. */
export async function machinePauses(cores: number, seconds: number, thresholdMs: number): Promise<MachinePauses> {
  const runs = Array.from({ length: cores }, (_, core) => spin(core, seconds, thresholdMs));
  const gaps = await Promise.all(runs);
  return { seconds, thresholdMs, cores: gaps.map(coreSummary), together: together(gaps) };
}

/** One core's gaps, as [start µs, length µs] on the monotonic clock shared by all processes. */
function spin(core: number, seconds: number, thresholdMs: number): Promise<[number, number][]> {
  const node = [process.execPath, "-e", spinner, String(seconds), String(thresholdMs)];
  const [cmd, ...args] = hasTaskset ? ["taskset", "-c", String(core), ...node] : node;
  return new Promise((resolve, reject) => {
    execFile(cmd!, args, { timeout: (seconds + 30) * 1000 }, (err, stdout) => {
      if (err) return reject(err);
      resolve(
        stdout
          .split(" ")
          .filter(Boolean)
          .map((g) => g.split(":").map(Number) as [number, number]),
      );
    });
  });
}

function coreSummary(gaps: [number, number][]): { pauses: number; longestMs: number } {
  return { pauses: gaps.length, longestMs: Math.max(0, ...gaps.map(([, length]) => length)) / 1000 };
}

/** Gaps of one core that began within 2 ms of a gap of another. */
function together(perCore: [number, number][][]): number {
  let n = 0;
  perCore.forEach((gaps, core) => {
    for (const [start] of gaps) {
      const shared = perCore.some((other, c) => c > core && other.some(([s]) => Math.abs(s - start) <= 2_000));
      if (shared) n++;
    }
  });
  return n;
}

export function describePauses(p: MachinePauses): string {
  const cores = p.cores.map((c) => `${c.pauses} (longest ${c.longestMs.toFixed(1)} ms)`).join(", ");
  return `machine alone, one spinner per core for ${p.seconds} s: pauses >= ${p.thresholdMs} ms per core ${cores}, ${p.together} on two cores at once`;
}
