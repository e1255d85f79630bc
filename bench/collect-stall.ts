// How long one round of the agent's host collection (the inventory and a telemetry sample, as
// each telemetry round takes them) holds the agent's event loop: the longest event-loop delay seen
// during a round, over ROUNDS rounds, in a process holding BALLAST_MIB of heap (a fork's cost grows
// with the parent's memory, and an agent relaying requests holds buffers). The floor, measured in
// the same run: the longest delay over a round that only waits (a 5 ms timer, then the same 20 ms), so a
// figure can be judged as a ratio on another machine. Run it twice, idle and with both cores busy
// (e.g. two `sha256sum /dev/zero`): a synchronous spawn waits for its child to be scheduled, so the
// busy machine is where a stall shows.
//
//   npx tsx bench/collect-stall.ts   (ROUNDS=20 BALLAST_MIB=300)
import { loadavg } from "node:os";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { collectInventory } from "../agent/collectors/inventory.js";
import { collectTelemetry } from "../agent/collectors/telemetry.js";
import { ms, numParam, summarize } from "./support/stats.js";

const rounds = numParam("ROUNDS", 20);
const ballast = Array.from({ length: numParam("BALLAST_MIB", 300) }, () => Buffer.alloc(1 << 20, 1));

/** The longest event-loop delay, ms, while `work` runs and for 20 ms after. */
async function longestDelay(work: () => Promise<unknown>): Promise<number> {
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  await work();
  await new Promise((resolve) => setTimeout(resolve, 20));
  h.disable();
  return h.max / 1e6;
}

const collect = () => Promise.all([collectInventory(), collectTelemetry()]);
await collect(); // The OS's and CPU's facts are read once per process, and the code is compiled.
const loadBefore = loadavg()[0]!;
const collecting: number[] = [];
const floor: number[] = [];
for (let i = 0; i < rounds; i++) {
  collecting.push(await longestDelay(collect));
  floor.push(await longestDelay(() => new Promise((resolve) => setTimeout(resolve, 5))));
}
const line = (what: string, xs: number[]) => {
  const s = summarize(xs);
  return `${what}: median ${ms(s.p50)} ms, range ${ms(Math.min(...xs))}-${ms(Math.max(...xs))} ms`;
};
process.stdout.write(
  [
    `longest event-loop delay per round, ${rounds} rounds, ${ballast.length} MiB of ballast`,
    line("a collection round (inventory + telemetry)", collecting),
    line("the floor (a round that only waits)", floor),
    `load average ${loadBefore.toFixed(2)} before, ${loadavg()[0]!.toFixed(2)} after`,
    "",
  ].join("\n"),
);
