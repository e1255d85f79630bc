// What Linux says about a runtime process: its memory (/proc/<pid>/status) and its start time
// (/proc/<pid>/stat), which tells a live runtime from an unrelated process that reused its pid.
import { readFile } from "node:fs/promises";

export interface ProcessMemory {
  rssBytes: number;
  /** Peak resident set size (VmHWM) over the process's life. */
  peakRssBytes: number;
}

/** Parses VmRSS and VmHWM (reported in kB) from a /proc/<pid>/status text. */
export function parseStatusMemory(status: string): ProcessMemory | undefined {
  const kb = (field: string) => {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(status);
    return m ? Number(m[1]) * 1024 : undefined;
  };
  const rss = kb("VmRSS");
  const peak = kb("VmHWM");
  return rss === undefined || peak === undefined ? undefined : { rssBytes: rss, peakRssBytes: peak };
}

export interface ProcessStat {
  /** One letter: R, S, D, Z (zombie), ... */
  state: string;
  /** Clock ticks after boot when the process started: with the pid, a process's identity. */
  startTicks: number;
  /** Its process group: a runtime's processes all share the runtime's pid as their group. */
  pgrp: number;
}

/** Parses /proc/<pid>/stat; the command name (field 2) may contain spaces and parentheses. */
export function parseStat(stat: string): ProcessStat | undefined {
  const close = stat.lastIndexOf(")");
  if (close < 0) return undefined;
  const fields = stat.slice(close + 2).split(" ");
  // After the name: field 3 (state) is fields[0], field 5 (pgrp) is fields[2], field 22
  // (starttime) is fields[19].
  const state = fields[0];
  const pgrp = Number(fields[2]);
  const startTicks = Number(fields[19]);
  return state && Number.isSafeInteger(startTicks) && Number.isSafeInteger(pgrp) ? { state, startTicks, pgrp } : undefined;
}

/** The memory of a live process, or undefined once it is gone. */
export async function readMemory(pid: number): Promise<ProcessMemory | undefined> {
  return parseStatusMemory(await readProc(pid, "status"));
}

/** The stat of a live process (not a zombie), or undefined. */
export async function readStat(pid: number): Promise<ProcessStat | undefined> {
  const stat = parseStat(await readProc(pid, "stat"));
  return stat?.state === "Z" ? undefined : stat;
}

async function readProc(pid: number, file: string): Promise<string> {
  try {
    return await readFile(`/proc/${pid}/${file}`, "utf8");
  } catch {
    return "";
  }
}
