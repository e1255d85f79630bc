// Prints where a CPU profile written by node --cpu-prof spent its time, by self time:
//   npx tsx bench/support/read-profile.ts FILE.cpuprofile [TOP] [FROM-TO] [FUNCTION...]
// FROM-TO (microseconds of the monotonic clock, as bench/openai.ts prints its phases under
// BENCH_CPU_PROF) keeps only the samples of that window; FUNCTIONs get their inclusive time too.
import { readFileSync } from "node:fs";
import { printProfile, summarizeProfile, type CpuProfile } from "./profile.js";

const [file, top = "40", window = "", ...inclusive] = process.argv.slice(2);
if (file === undefined) throw new Error("usage: read-profile.ts FILE.cpuprofile [TOP] [FROM-TO] [FUNCTION...]");
const profile = JSON.parse(readFileSync(file, "utf8")) as CpuProfile;
const [from, to] = window === "" || window === "-" ? [] : window.split("-").map(Number);
printProfile(file, summarizeProfile(from === undefined ? profile : within(profile, from, to ?? Infinity), inclusive, Number(top)));

/** The samples taken between `from` and `to`. */
function within(p: CpuProfile, from: number, to: number): CpuProfile {
  const samples: number[] = [];
  const timeDeltas: number[] = [];
  let at = p.startTime;
  let last = from;
  (p.samples ?? []).forEach((node, i) => {
    at += p.timeDeltas?.[i] ?? 0;
    if (at < from || at > to) return;
    samples.push(node);
    timeDeltas.push(at - last);
    last = at;
  });
  return { ...p, samples, timeDeltas, startTime: from, endTime: Math.min(to, last) };
}
