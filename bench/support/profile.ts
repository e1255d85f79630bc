// A sampling CPU profile of the current process through node:inspector, started and stopped on
// demand (so only the interesting window is profiled), and a plain-text summary of where the time
// went: by package or module, by function (self time), and inclusive time under chosen functions.
import { writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  hitCount?: number;
  children?: number[];
}
export interface CpuProfile {
  nodes: ProfileNode[];
  samples?: number[];
  timeDeltas?: number[];
  startTime: number;
  endTime: number;
}

let session: Session | undefined;

export async function startProfile(intervalUs = 500): Promise<void> {
  session = new Session();
  session.connect();
  await session.post("Profiler.enable");
  await session.post("Profiler.setSamplingInterval", { interval: intervalUs });
  await session.post("Profiler.start");
}

export async function stopProfile(): Promise<CpuProfile> {
  if (session === undefined) throw new Error("no profile running");
  const { profile } = (await session.post("Profiler.stop")) as unknown as { profile: CpuProfile };
  session.disconnect();
  session = undefined;
  // PROFILE_OUT=<prefix> keeps the raw profile too, for callers' chains and flame graphs (Chrome
  // DevTools, speedscope), which the summary below cannot show.
  const out = process.env.PROFILE_OUT;
  if (out !== undefined && out !== "") writeFileSync(`${out}.${process.pid}.cpuprofile`, JSON.stringify(profile));
  return profile;
}

/** Where a frame's code lives: a package, a node core module, a project file, wasm, or a VM state. */
export function groupOf(f: CallFrame): string {
  const url = f.url;
  if (url === "") return f.functionName.startsWith("(") ? f.functionName : "(native/builtin)";
  if (url.startsWith("wasm://")) return "wasm (PGlite)";
  const nm = url.lastIndexOf("/node_modules/");
  if (nm >= 0) {
    const rest = url.slice(nm + "/node_modules/".length).split("/");
    return rest[0]!.startsWith("@") ? `${rest[0]}/${rest[1]}` : rest[0]!;
  }
  if (url.startsWith("node:")) {
    const m = url.slice(5).replace(/^internal\//, "");
    const head = m.split("/")[0]!;
    if (/^_?tls/.test(head)) return "node:tls";
    if (head === "http2") return "node:http2";
    if (head === "streams" || head === "stream") return "node:streams";
    if (/^(net|stream_base_commons)$/.test(head)) return "node:net";
    if (/^(process|timers|async_hooks|event_target|abort_controller)$/.test(head)) return "node:event loop";
    return `node:${head}`;
  }
  const app = /\/work\/[^/]+\/(.*)$/.exec(url.replace(/^file:\/\//, ""));
  if (app) {
    const parts = app[1]!.split("/");
    return parts[0] === "gen" ? `gen/${parts[1] ?? ""}` : `app:${parts.slice(0, -1).join("/") || parts[0]}`;
  }
  return url;
}

export interface ProfileSummary {
  totalMs: number;
  /** Stretches of at least `longTaskMs` without an idle sample: what kept the event loop busy. */
  longTasks: { count: number; totalMs: number; maxMs: number; by: { name: string; ms: number }[] };
  groups: { name: string; ms: number; pct: number }[];
  functions: { name: string; ms: number; pct: number }[];
  inclusive: { name: string; ms: number; pct: number }[];
}

export function summarizeProfile(profile: CpuProfile, inclusiveNames: string[] = [], top = 25, longTaskMs = 20): ProfileSummary {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<number, number>();
  const samples = profile.samples ?? [];
  const deltas = profile.timeDeltas ?? [];
  // Each sample's time is the delta to the next one.
  for (let i = 0; i < samples.length; i++) {
    const dt = (deltas[i + 1] ?? 0) / 1000;
    self.set(samples[i]!, (self.get(samples[i]!) ?? 0) + dt);
  }
  const totalMs = (profile.endTime - profile.startTime) / 1000;
  const groups = new Map<string, number>();
  const fns = new Map<string, number>();
  for (const [id, t] of self) {
    const f = byId.get(id)!.callFrame;
    const g = groupOf(f);
    groups.set(g, (groups.get(g) ?? 0) + t);
    const short = f.url.replace(/^.*\/(node_modules|work\/[^/]+)\//, "");
    const name = `${f.functionName || "(anonymous)"} ${short ? `${short}:${f.lineNumber + 1}` : ""}`.trim();
    fns.set(name, (fns.get(name) ?? 0) + t);
  }
  // Inclusive time under each named function (outermost occurrence on a path only).
  const inclusiveTotals = new Map<string, number>();
  const wanted = new Set(inclusiveNames);
  const root = profile.nodes[0]!;
  const memo = new Map<number, number>();
  const total = (id: number): number => {
    const cached = memo.get(id);
    if (cached !== undefined) return cached;
    const n = byId.get(id)!;
    let t = self.get(id) ?? 0;
    for (const c of n.children ?? []) t += total(c);
    memo.set(id, t);
    return t;
  };
  const walk = (id: number, active: Set<string>) => {
    const n = byId.get(id)!;
    const fn = n.callFrame.functionName;
    let next = active;
    if (wanted.has(fn) && !active.has(fn)) {
      inclusiveTotals.set(fn, (inclusiveTotals.get(fn) ?? 0) + total(id));
      next = new Set(active).add(fn);
    }
    for (const c of n.children ?? []) walk(c, next);
  };
  walk(root.id, new Set());
  const rows = (m: Map<string, number>, limit: number) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, limit)
      .map(([name, t]) => ({ name, ms: Math.round(t), pct: Math.round((t / totalMs) * 1000) / 10 }));
  // Long tasks: each sample is charged to the innermost project frame on its stack (where our
  // code asked for the work), else to the package or module of its leaf.
  const charge = new Map<number, string>();
  const chargeOf = (id: number): string => {
    const known = charge.get(id);
    if (known !== undefined) return known;
    let cur: number | undefined = id;
    let name = groupOf(byId.get(id)!.callFrame);
    while (cur !== undefined) {
      const f = byId.get(cur)!.callFrame;
      if (/\/work\/[^/]+\/(server|common)\//.test(f.url)) {
        name = `${f.functionName || "(anonymous)"} (${f.url.replace(/^.*\/work\/[^/]+\//, "")})`;
        break;
      }
      cur = parent.get(cur);
    }
    charge.set(id, name);
    return name;
  };
  const longBy = new Map<string, number>();
  let longCount = 0;
  let longTotal = 0;
  let longMax = 0;
  let run: { ms: number; by: Map<string, number> } = { ms: 0, by: new Map() };
  const endRun = () => {
    if (run.ms >= longTaskMs) {
      longCount++;
      longTotal += run.ms;
      longMax = Math.max(longMax, run.ms);
      for (const [k, v] of run.by) longBy.set(k, (longBy.get(k) ?? 0) + v);
    }
    run = { ms: 0, by: new Map() };
  };
  for (let i = 0; i < samples.length; i++) {
    const id = samples[i]!;
    const dt = (deltas[i + 1] ?? 0) / 1000;
    if (byId.get(id)!.callFrame.functionName === "(idle)") {
      endRun();
      continue;
    }
    run.ms += dt;
    const c = chargeOf(id);
    run.by.set(c, (run.by.get(c) ?? 0) + dt);
  }
  endRun();
  const longTasks = {
    count: longCount,
    totalMs: Math.round(longTotal),
    maxMs: Math.round(longMax),
    by: [...longBy.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 15)
      .map(([name, t]) => ({ name, ms: Math.round(t) })),
  };
  return {
    totalMs: Math.round(totalMs),
    longTasks,
    groups: rows(groups, 30),
    functions: rows(fns, top),
    inclusive: rows(inclusiveTotals, inclusiveNames.length),
  };
}

export function printProfile(title: string, s: ProfileSummary): void {
  console.log(`\n${title}: ${s.totalMs} ms of wall time sampled (percentages are of wall time on one thread)`);
  console.log("  by package/module (self time):");
  for (const g of s.groups) console.log(`    ${g.pct.toFixed(1).padStart(5)}%  ${String(g.ms).padStart(6)} ms  ${g.name}`);
  if (s.inclusive.length > 0) {
    console.log("  inclusive time under:");
    for (const g of s.inclusive) console.log(`    ${g.pct.toFixed(1).padStart(5)}%  ${String(g.ms).padStart(6)} ms  ${g.name}`);
  }
  const l = s.longTasks;
  console.log(
    `  busy stretches of 20 ms or more: ${l.count}, ${l.totalMs} ms in all, longest ${l.maxMs} ms; charged to the innermost server frame, else the leaf's package:`,
  );
  for (const g of l.by) console.log(`    ${String(g.ms).padStart(6)} ms  ${g.name}`);
  console.log("  top functions (self time):");
  for (const g of s.functions) console.log(`    ${g.pct.toFixed(1).padStart(5)}%  ${String(g.ms).padStart(6)} ms  ${g.name}`);
}

interface AllocNode {
  callFrame: CallFrame;
  selfSize: number;
  children: AllocNode[];
}

let allocSession: Session | undefined;

/** Samples allocations, including objects already collected again (the garbage is the point). */
export async function startAllocationProfile(intervalBytes = 16384): Promise<void> {
  allocSession = new Session();
  allocSession.connect();
  await allocSession.post("HeapProfiler.enable");
  await allocSession.post("HeapProfiler.startSampling", {
    samplingInterval: intervalBytes,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  } as never);
}

export interface AllocationSummary {
  totalBytes: number;
  groups: { name: string; bytes: number; pct: number }[];
  functions: { name: string; bytes: number; pct: number }[];
  inclusive: { name: string; bytes: number; pct: number }[];
}

/** Bytes allocated by package/module and by function (self), and under chosen functions. */
export async function stopAllocationProfile(inclusiveNames: string[] = [], top = 25): Promise<AllocationSummary> {
  if (allocSession === undefined) throw new Error("no allocation profile running");
  const { profile } = (await allocSession.post("HeapProfiler.stopSampling")) as unknown as { profile: { head: AllocNode } };
  allocSession.disconnect();
  allocSession = undefined;
  const groups = new Map<string, number>();
  const fns = new Map<string, number>();
  const inclusive = new Map<string, number>();
  const wanted = new Set(inclusiveNames);
  let totalBytes = 0;
  const walk = (n: AllocNode, active: Set<string>): number => {
    const f = n.callFrame;
    let next = active;
    const claims = wanted.has(f.functionName) && !active.has(f.functionName);
    if (claims) next = new Set(active).add(f.functionName);
    let sum = n.selfSize;
    if (n.selfSize > 0) {
      totalBytes += n.selfSize;
      const g = groupOf(f);
      groups.set(g, (groups.get(g) ?? 0) + n.selfSize);
      const short = f.url.replace(/^.*\/(node_modules|work\/[^/]+)\//, "");
      const name = `${f.functionName || "(anonymous)"} ${short ? `${short}:${f.lineNumber + 1}` : ""}`.trim();
      fns.set(name, (fns.get(name) ?? 0) + n.selfSize);
    }
    for (const c of n.children) sum += walk(c, next);
    if (claims) inclusive.set(f.functionName, (inclusive.get(f.functionName) ?? 0) + sum);
    return sum;
  };
  walk(profile.head, new Set());
  const rows = (m: Map<string, number>, limit: number) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, limit)
      .map(([name, bytes]) => ({ name, bytes, pct: Math.round((bytes / Math.max(1, totalBytes)) * 1000) / 10 }));
  return { totalBytes, groups: rows(groups, 25), functions: rows(fns, top), inclusive: rows(inclusive, inclusiveNames.length) };
}

export function printAllocations(title: string, s: AllocationSummary, perUnit: number, unit: string): void {
  const k = (b: number) => `${(b / perUnit / 1024).toFixed(2)} KiB/${unit}`;
  console.log(`\n${title}: ${(s.totalBytes / 2 ** 20).toFixed(0)} MiB allocated in the window, ${k(s.totalBytes)} (sampled)`);
  console.log("  by package/module (self):");
  for (const g of s.groups) console.log(`    ${g.pct.toFixed(1).padStart(5)}%  ${k(g.bytes).padStart(16)}  ${g.name}`);
  if (s.inclusive.length > 0) {
    console.log("  inclusive, under:");
    for (const g of s.inclusive) console.log(`    ${g.pct.toFixed(1).padStart(5)}%  ${k(g.bytes).padStart(16)}  ${g.name}`);
  }
  console.log("  top functions (self):");
  for (const g of s.functions) console.log(`    ${g.pct.toFixed(1).padStart(5)}%  ${k(g.bytes).padStart(16)}  ${g.name}`);
}
