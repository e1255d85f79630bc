// GPU memory evidence of a runtime from nvidia-smi's compute processes: the parser, the sum over
// the runtime's process group only, and a sampler that keeps the peak; run against a fake
// nvidia-smi (injected path) and real processes.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ManualClock } from "../../common/clock.js";
import { NvidiaSmiParseError, parseNvidiaSmiComputeApps } from "../../agent/collectors/nvidia-smi.js";
import { GpuMemorySampler, groupGpuBytes, sampleGroupGpuMemory } from "../../agent/engines/gpu-memory.js";

const MiB = 1024n * 1024n;
const dir = mkdtempSync(join(tmpdir(), "mf-gpu-mem-"));
let group: ChildProcess;

/** A fake nvidia-smi that lists every process on the machine as using the MiB in `mibFile`. */
function fake(name: string, body: string): string {
  const path = join(dir, name);
  writeFileSync(path, `#!/bin/sh\n${body}\n`);
  chmodSync(path, 0o755);
  return path;
}
const mibFile = join(dir, "mib");
const everyPid = fake("every-pid", `m=$(cat ${mibFile}); for p in /proc/[0-9]*; do echo "\${p#/proc/}, $m"; done`);

beforeAll(() => {
  writeFileSync(mibFile, "100");
  // A process group of its own, as the supervisor starts runtimes: a leader and one child.
  group = spawn("/bin/sh", ["-c", "sleep 60 & wait"], { detached: true, stdio: "ignore" });
});
afterAll(() => {
  if (group.pid !== undefined) process.kill(-group.pid, "SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

describe("nvidia-smi compute processes", () => {
  it("parses pid and used memory in MiB; a pid may repeat (one row per GPU)", () => {
    expect(parseNvidiaSmiComputeApps("4242, 1024\n4242, 512\n\n77, [N/A]\n")).toEqual([
      { pid: 4242, usedMemoryBytes: 1024n * MiB },
      { pid: 4242, usedMemoryBytes: 512n * MiB },
      { pid: 77, usedMemoryBytes: 0n },
    ]);
    expect(parseNvidiaSmiComputeApps("")).toEqual([]);
  });

  it.each(["4242", "x, 10", "4242, ten", "1, 2, 3"])("refuses %j", (line) => {
    expect(() => parseNvidiaSmiComputeApps(`1, 5\n${line}\n`)).toThrow(NvidiaSmiParseError);
  });

  it("sums only the processes of the runtime's group", () => {
    const apps = [
      { pid: 10, usedMemoryBytes: 3n },
      { pid: 11, usedMemoryBytes: 4n },
      { pid: 10, usedMemoryBytes: 5n },
      { pid: 12, usedMemoryBytes: 100n },
      { pid: 13, usedMemoryBytes: 1000n },
    ];
    const groupOf = new Map([
      [10, 10],
      [11, 10],
      [12, 99],
    ]);
    expect(groupGpuBytes(apps, 10, groupOf)).toBe(12n);
    expect(groupGpuBytes(apps, 7, groupOf)).toBe(0n);
  });
});

describe("sampling a runtime's GPU memory", () => {
  it("counts the group's two processes and no other process on the machine", async () => {
    await expect.poll(() => sampleGroupGpuMemory(group.pid!, { command: everyPid })).toBe(200n * MiB);
  });

  it("tells a node without nvidia-smi from a failed run", async () => {
    expect(await sampleGroupGpuMemory(group.pid!, { command: join(dir, "no-such-nvidia-smi") })).toBe("none");
    expect(await sampleGroupGpuMemory(group.pid!, { command: fake("broken", "echo 'NVIDIA-SMI has failed' ; exit 9") })).toBeUndefined();
  });

  it("keeps the peak of its samples, taking one more when stopped", async () => {
    const clock = new ManualClock();
    writeFileSync(mibFile, "300");
    const sampler = new GpuMemorySampler(group.pid!, clock, 1000, { command: everyPid });
    await expect.poll(() => clock.sleeping).toBe(1);
    writeFileSync(mibFile, "50");
    await clock.tick(1000);
    expect(await sampler.stop()).toBe(600n * MiB);
    expect(await sampler.stop()).toBe(600n * MiB);
    writeFileSync(mibFile, "100");
  });

  it("stops sampling at once on a node without nvidia-smi and reports 0", async () => {
    const clock = new ManualClock();
    const sampler = new GpuMemorySampler(group.pid!, clock, 1000, { command: join(dir, "no-such-nvidia-smi") });
    expect(await sampler.stop()).toBe(0n);
    expect(clock.sleeping).toBe(0);
  });
});
