import { accessSync, constants } from "node:fs";
import { copyFile, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import si from "systeminformation";
import { create } from "@bufbuild/protobuf";
import { DiskSchema, GpuInfoSchema, HostInfoSchema } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import {
  collectInventory,
  inventoryFingerprint,
  NvidiaSmiParseError,
  parseNvidiaSmiInventory,
  type Inventory,
  type NvidiaSmiInventoryRow,
} from "../../agent/collectors/inventory.js";
import { findOnPath } from "../../agent/collectors/nvidia-smi.js";
import { collectTelemetry, parseNvidiaSmiTelemetry, type NvidiaSmiTelemetryRow } from "../../agent/collectors/telemetry.js";

const MIB = 1024n * 1024n;
const FAKE_BIN_DIR = fileURLToPath(new URL("../fixtures/nvidia-smi/", import.meta.url));
const THREE_GPUS_DIR = path.join(FAKE_BIN_DIR, "three-gpus");

const UUID_0 = "GPU-1b2c3d4e-5f60-7a8b-9c0d-1e2f3a4b5c6d";
const UUID_1 = "GPU-7e8f9a0b-1c2d-3e4f-5a6b-7c8d9e0f1a2b";
const UUID_2 = "GPU-c3d4e5f6-a7b8-49c0-d1e2-f3a4b5c6d7e8";
const DRIVER_FAILED =
  "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. " +
  "Make sure that the latest NVIDIA driver is installed and running.";

// ---------------------------------------------------------------------------------------------
// Environment: a fake nvidia-smi first on PATH, reading its answers from FAKE_NVIDIA_SMI_DIR.

const savedEnv = {
  PATH: process.env.PATH,
  FAKE_NVIDIA_SMI_DIR: process.env.FAKE_NVIDIA_SMI_DIR,
  FAKE_NVIDIA_SMI_ARGS_LOG: process.env.FAKE_NVIDIA_SMI_ARGS_LOG,
};
const tempDirs: string[] = [];

function restoreEnv(): void {
  for (const [key, value] of Object.entries(savedEnv)) {
    if (value === undefined) delete process.env[key];
    else process.env[key] = value;
  }
}

function useFakeNvidiaSmi(answersDir: string): void {
  process.env.PATH = [FAKE_BIN_DIR, savedEnv.PATH ?? ""].join(path.delimiter);
  process.env.FAKE_NVIDIA_SMI_DIR = answersDir;
}

/** PATH without any directory holding an executable nvidia-smi (ours, or a real one). */
function pathWithoutNvidiaSmi(): string {
  return (savedEnv.PATH ?? "")
    .split(path.delimiter)
    .filter((dir) => {
      if (dir === "" || path.resolve(dir) === path.resolve(FAKE_BIN_DIR)) return false;
      try {
        accessSync(path.join(dir, "nvidia-smi"), constants.X_OK);
        return false;
      } catch {
        return true;
      }
    })
    .join(path.delimiter);
}

/**
 * A fresh answers directory: a copy of the recorded three-GPU sample, with `files` written over it
 * (null deletes a file).
 */
async function scenario(files: Record<string, string | null> = {}): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), "fake-nvidia-smi-"));
  tempDirs.push(dir);
  for (const name of ["inventory.csv", "telemetry.csv"]) {
    await copyFile(path.join(THREE_GPUS_DIR, name), path.join(dir, name));
  }
  for (const [name, content] of Object.entries(files)) {
    if (content === null) await rm(path.join(dir, name), { force: true });
    else await writeFile(path.join(dir, name), content);
  }
  return dir;
}

async function recordedLines(name: string): Promise<string[]> {
  return (await readFile(path.join(THREE_GPUS_DIR, name), "utf8")).trimEnd().split("\n");
}

beforeEach(restoreEnv);
afterEach(async () => {
  restoreEnv();
  await Promise.all(tempDirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
});

// ---------------------------------------------------------------------------------------------
// Pure parsers.

function invRow(
  uuid: string,
  index: number,
  pciBusId: string,
  name: string,
  memoryMiB: bigint,
  driverVersion = "550.54.15",
): NvidiaSmiInventoryRow {
  return { uuid, index, pciBusId, name, memoryTotalBytes: memoryMiB * MIB, driverVersion };
}

describe("parseNvidiaSmiInventory", () => {
  const ok: { name: string; csv: string; want: NvidiaSmiInventoryRow[] }[] = [
    { name: "empty output", csv: "", want: [] },
    { name: "only blank lines", csv: "\n\n  \n", want: [] },
    {
      name: "one GPU",
      csv: `${UUID_0}, 0, 00000000:3B:00.0, NVIDIA A100-SXM4-80GB, 81920, 550.54.15\n`,
      want: [invRow(UUID_0, 0, "00000000:3B:00.0", "NVIDIA A100-SXM4-80GB", 81920n)],
    },
    {
      name: "CRLF, no trailing newline, extra spaces, blank line",
      csv:
        `  ${UUID_0} ,0,00000000:3B:00.0 ,  NVIDIA A100-SXM4-80GB,81920 , 550.54.15\r\n\r\n` +
        `${UUID_2}, 2, 00000000:86:00.0, NVIDIA H100 80GB HBM3, 81559, 550.54.15`,
      want: [
        invRow(UUID_0, 0, "00000000:3B:00.0", "NVIDIA A100-SXM4-80GB", 81920n),
        invRow(UUID_2, 2, "00000000:86:00.0", "NVIDIA H100 80GB HBM3", 81559n),
      ],
    },
    {
      name: "unavailable memory and pci id become 0 and empty",
      csv: `${UUID_1}, 1, [N/A], NVIDIA A100-SXM4-80GB, [Not Supported], 550.54.15\n`,
      want: [invRow(UUID_1, 1, "", "NVIDIA A100-SXM4-80GB", 0n)],
    },
  ];
  it.each(ok)("parses $name", ({ csv, want }) => {
    expect(parseNvidiaSmiInventory(csv)).toEqual(want);
  });

  it("parses the recorded three-GPU sample", async () => {
    const csv = await readFile(path.join(THREE_GPUS_DIR, "inventory.csv"), "utf8");
    expect(parseNvidiaSmiInventory(csv)).toEqual([
      invRow(UUID_0, 0, "00000000:3B:00.0", "NVIDIA A100-SXM4-80GB", 81920n),
      invRow(UUID_1, 1, "00000000:5E:00.0", "NVIDIA A100-SXM4-80GB", 81920n),
      invRow(UUID_2, 2, "00000000:86:00.0", "NVIDIA H100 80GB HBM3", 81559n),
    ]);
  });

  const good0 = `${UUID_0}, 0, 00000000:3B:00.0, NVIDIA A100-SXM4-80GB, 81920, 550.54.15`;
  const bad: { name: string; csv: string; line: number; reason: RegExp; kept: number }[] = [
    { name: "garbage", csv: "this is not csv\n", line: 1, reason: /expected 6 fields, got 1/, kept: 0 },
    {
      name: "the driver error message on stdout",
      csv: `${DRIVER_FAILED}\n`,
      line: 1,
      reason: /expected 6 fields/,
      kept: 0,
    },
    {
      name: "too few fields after a good line",
      csv: `${good0}\n${UUID_1}, 1, 00000000:5E:00.0\n`,
      line: 2,
      reason: /expected 6 fields, got 3/,
      kept: 1,
    },
    {
      name: "too many fields (a csv header or a different query)",
      csv: `${good0}, 97\n`,
      line: 1,
      reason: /got 7/,
      kept: 0,
    },
    {
      name: "non-numeric index",
      csv: `${UUID_0}, zero, 00000000:3B:00.0, NVIDIA A100-SXM4-80GB, 81920, 550.54.15\n`,
      line: 1,
      reason: /invalid index/,
      kept: 0,
    },
    {
      name: "unavailable uuid",
      csv: `[N/A], 0, 00000000:3B:00.0, NVIDIA A100-SXM4-80GB, 81920, 550.54.15\n`,
      line: 1,
      reason: /invalid uuid/,
      kept: 0,
    },
    {
      name: "memory with units (query without nounits)",
      csv: `${UUID_0}, 0, 00000000:3B:00.0, NVIDIA A100-SXM4-80GB, 81920 MiB, 550.54.15\n`,
      line: 1,
      reason: /invalid memory.total/,
      kept: 0,
    },
    {
      name: "duplicate uuid; rows around it are kept",
      csv: `${good0}\n${good0}\n${UUID_2}, 2, 00000000:86:00.0, NVIDIA H100 80GB HBM3, 81559, 550.54.15\n`,
      line: 2,
      reason: /duplicate uuid/,
      kept: 2,
    },
  ];
  it.each(bad)("rejects $name", ({ csv, line, reason, kept }) => {
    let caught: unknown;
    try {
      parseNvidiaSmiInventory(csv);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(NvidiaSmiParseError);
    const err = caught as NvidiaSmiParseError<NvidiaSmiInventoryRow>;
    expect(err.lineNumber).toBe(line);
    expect(err.reason).toMatch(reason);
    expect(err.rows).toHaveLength(kept);
    expect(err.message.length).toBeLessThan(250);
  });
});

describe("parseNvidiaSmiTelemetry", () => {
  const row = (
    uuid: string,
    utilizationPercent: number,
    memoryUsedMiB: bigint,
    temperatureCelsius: number,
    powerWatts: number,
  ): NvidiaSmiTelemetryRow => ({
    uuid,
    utilizationPercent,
    memoryUsedBytes: memoryUsedMiB * MIB,
    temperatureCelsius,
    powerWatts,
  });
  const ok: { name: string; csv: string; want: NvidiaSmiTelemetryRow[] }[] = [
    { name: "empty output", csv: "", want: [] },
    {
      name: "a busy GPU",
      csv: `${UUID_0}, 97, 71234, 67, 389.41\n`,
      want: [row(UUID_0, 97, 71234n, 67, 389.41)],
    },
    {
      name: "[N/A] and [Not Supported] as 0",
      csv: `${UUID_1}, [N/A], 4, [Not Supported], [N/A]\n${UUID_2}, [Not Supported], [N/A], 51, 312.05\n`,
      want: [row(UUID_1, 0, 4n, 0, 0), row(UUID_2, 0, 0n, 51, 312.05)],
    },
  ];
  it.each(ok)("parses $name", ({ csv, want }) => {
    expect(parseNvidiaSmiTelemetry(csv)).toEqual(want);
  });

  const bad: { name: string; csv: string; line: number; kept: number }[] = [
    { name: "garbage", csv: "No devices were found\n", line: 1, kept: 0 },
    { name: "an inventory line", csv: `${UUID_0}, 0, 00000000:3B:00.0, A100, 81920, 550.54.15\n`, line: 1, kept: 0 },
    { name: "a word for a number", csv: `${UUID_0}, 97, 71234, hot, 389.41\n${UUID_1}, 0, 4, 34, 61.87\n`, line: 1, kept: 1 },
    { name: "hex for a number", csv: `${UUID_0}, 0x10, 71234, 67, 389.41\n`, line: 1, kept: 0 },
  ];
  it.each(bad)("rejects $name", ({ csv, line, kept }) => {
    try {
      parseNvidiaSmiTelemetry(csv);
      expect.unreachable("should have thrown");
    } catch (err) {
      expect(err).toBeInstanceOf(NvidiaSmiParseError);
      const e = err as NvidiaSmiParseError<NvidiaSmiTelemetryRow>;
      expect(e.lineNumber).toBe(line);
      expect(e.rows).toHaveLength(kept);
    }
  });
});

// ---------------------------------------------------------------------------------------------
// The real collectors, against the fake nvidia-smi.

function expectHostFacts(inv: Inventory): void {
  expect(inv.host.hostname).toBe(os.hostname());
  expect(inv.host.hostname).not.toBe("");
  expect(inv.host.kernel).not.toBe("");
  expect(inv.host.architecture).toBe(os.arch());
  expect(inv.host.cpuModel).not.toBe("");
  expect(inv.host.cpuCores).toBeGreaterThan(0);
  expect(inv.host.memoryTotalBytes).toBeGreaterThan(0n);
  for (const d of inv.host.disks) {
    expect(d.mount).not.toBe("");
  }
}

describe("findOnPath", () => {
  it("finds nvidia-smi where a spawn would, without starting one", async () => {
    const fake = [FAKE_BIN_DIR, savedEnv.PATH ?? ""].join(path.delimiter);
    expect(await findOnPath("nvidia-smi", fake)).toBe(path.join(FAKE_BIN_DIR, "nvidia-smi"));
    expect(await findOnPath("nvidia-smi", pathWithoutNvidiaSmi())).toBeUndefined();
    expect(await findOnPath("nvidia-smi", "")).toBeUndefined();
    expect(await findOnPath("/opt/nvidia/bin/nvidia-smi", "")).toBe("/opt/nvidia/bin/nvidia-smi");
    expect(await findOnPath("nvidia-smi", undefined)).toBe("nvidia-smi");
  });
});

describe("collectInventory", () => {
  it("reads the OS's and the CPU's facts once and mounts without fsSize (systeminformation blocks the event loop for them), the rest every time", async () => {
    useFakeNvidiaSmi(await scenario());
    await collectInventory();
    const osInfo = vi.spyOn(si, "osInfo");
    const cpu = vi.spyOn(si, "cpu");
    const fsSize = vi.spyOn(si, "fsSize");
    try {
      const [first, second] = [await collectInventory(), await collectInventory()];
      // Mounts come from /proc/mounts and statfs on Linux (agent/collectors/mounts.ts), not fsSize's execSync.
      expect([osInfo.mock.calls.length, cpu.mock.calls.length, fsSize.mock.calls.length]).toEqual([
        0,
        0,
        process.platform === "linux" ? 0 : 2,
      ]);
      expect(second.host.disks.some((d) => d.mount === "/" && d.sizeBytes > 0n)).toBe(true);
      expect(second.host).toEqual(first.host);
      expectHostFacts(second);
    } finally {
      vi.restoreAllMocks();
    }
  });

  it("reports the three recorded GPUs and the host, complete", async () => {
    const dir = await scenario();
    const argsLog = path.join(dir, "args.log");
    process.env.FAKE_NVIDIA_SMI_ARGS_LOG = argsLog;
    useFakeNvidiaSmi(dir);

    const inv = await collectInventory();

    expect(inv.gpuCollectionComplete).toBe(true);
    expect(inv.gpuCollectionError).toBe("");
    expect(inv.gpus.map((g) => [g.uuid, g.index, g.pciBusId, g.model])).toEqual([
      [UUID_0, 0, "00000000:3B:00.0", "NVIDIA A100-SXM4-80GB"],
      [UUID_1, 1, "00000000:5E:00.0", "NVIDIA A100-SXM4-80GB"],
      [UUID_2, 2, "00000000:86:00.0", "NVIDIA H100 80GB HBM3"],
    ]);
    expect(inv.gpus.map((g) => g.memoryTotalBytes)).toEqual([81920n * MIB, 81920n * MIB, 81559n * MIB]);
    expect(inv.gpus.every((g) => g.vendor === "NVIDIA" && g.driverVersion === "550.54.15")).toBe(true);
    expectHostFacts(inv);
    expect(await readFile(argsLog, "utf8")).toBe(
      "--query-gpu=uuid,index,pci.bus_id,name,memory.total,driver_version --format=csv,noheader,nounits\n",
    );
  });

  it("reports a complete inventory without a GPU that disappeared", async () => {
    const lines = await recordedLines("inventory.csv");
    useFakeNvidiaSmi(await scenario());
    const before = await collectInventory();

    useFakeNvidiaSmi(await scenario({ "inventory.csv": `${lines[0]}\n${lines[2]}\n` }));
    const after = await collectInventory();

    expect(after.gpuCollectionComplete).toBe(true);
    expect(after.gpus.map((g) => g.uuid)).toEqual([UUID_0, UUID_2]);
    expect(inventoryFingerprint(after)).not.toBe(inventoryFingerprint(before));
  });

  it("is incomplete with a short error when nvidia-smi cannot reach the driver", async () => {
    useFakeNvidiaSmi(await scenario({ "inventory.csv": null, exit_code: "9", stderr: `${DRIVER_FAILED}\n` }));
    const inv = await collectInventory();
    expect(inv.gpuCollectionComplete).toBe(false);
    expect(inv.gpus).toEqual([]);
    expect(inv.gpuCollectionError).toBe(`nvidia-smi exited with code 9: ${DRIVER_FAILED}`);
    expectHostFacts(inv);
  });

  it("uses the message nvidia-smi prints on stdout when stderr is empty", async () => {
    // The real nvidia-smi prints "NVIDIA-SMI has failed ..." and "No devices were found" on stdout.
    useFakeNvidiaSmi(await scenario({ "inventory.csv": "No devices were found\n", exit_code: "6" }));
    const inv = await collectInventory();
    expect(inv.gpuCollectionComplete).toBe(false);
    expect(inv.gpuCollectionError).toBe("nvidia-smi exited with code 6: No devices were found");
  });

  it("keeps the GPUs that were listed before a non-zero exit", async () => {
    const lines = await recordedLines("inventory.csv");
    useFakeNvidiaSmi(
      await scenario({
        "inventory.csv": `${lines[0]}\n${lines[1]}\nUnable to determine the device handle for GPU0000:86:00.0: Unknown Error\n`,
        exit_code: "15",
      }),
    );
    const inv = await collectInventory();
    expect(inv.gpuCollectionComplete).toBe(false);
    expect(inv.gpus.map((g) => g.uuid)).toEqual([UUID_0, UUID_1]);
    expect(inv.gpuCollectionError).toMatch(/^nvidia-smi exited with code 15: Unable to determine/);
  });

  it("keeps the error short even when stderr is huge", async () => {
    useFakeNvidiaSmi(await scenario({ exit_code: "1", stderr: `${"x".repeat(100_000)}\nsecond line\n` }));
    const inv = await collectInventory();
    expect(inv.gpuCollectionComplete).toBe(false);
    expect(inv.gpuCollectionError.length).toBeLessThanOrEqual(300);
    expect(inv.gpuCollectionError).toMatch(/^nvidia-smi exited with code 1: xxx/);
  });

  it("is incomplete when the output is garbage, even with exit status 0", async () => {
    useFakeNvidiaSmi(await scenario({ "inventory.csv": "\u0000\u0001garbage; not, a csv\n%%%\n" }));
    const inv = await collectInventory();
    expect(inv.gpuCollectionComplete).toBe(false);
    expect(inv.gpus).toEqual([]);
    expect(inv.gpuCollectionError).toMatch(/line 1: expected 6 fields, got 2/);
  });

  it("keeps the parsed GPUs when one line is garbage", async () => {
    const lines = await recordedLines("inventory.csv");
    useFakeNvidiaSmi(await scenario({ "inventory.csv": `${lines[0]}\n${lines[1]}\n@@@@\n` }));
    const inv = await collectInventory();
    expect(inv.gpuCollectionComplete).toBe(false);
    expect(inv.gpus.map((g) => g.uuid)).toEqual([UUID_0, UUID_1]);
    expect(inv.gpuCollectionError).toMatch(/line 3/);
  });

  it("is incomplete when nvidia-smi hangs past the timeout", async () => {
    useFakeNvidiaSmi(await scenario({ sleep_seconds: "30" }));
    const started = performance.now();
    const inv = await collectInventory({ nvidiaSmiTimeoutMs: 200 });
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(inv.gpuCollectionComplete).toBe(false);
    expect(inv.gpus).toEqual([]);
    expect(inv.gpuCollectionError).toBe("nvidia-smi timed out after 200 ms");
  });

  it("reports a CPU-only node, complete, when nvidia-smi is not on PATH", async () => {
    process.env.PATH = pathWithoutNvidiaSmi();
    process.env.FAKE_NVIDIA_SMI_DIR = await scenario();
    const inv = await collectInventory();
    expect(inv.gpuCollectionComplete).toBe(true);
    expect(inv.gpuCollectionError).toBe("");
    expect(inv.gpus).toEqual([]);
    expectHostFacts(inv);
  });

  it("has a fingerprint that is stable across collections and GPU order", async () => {
    const lines = await recordedLines("inventory.csv");
    useFakeNvidiaSmi(await scenario());
    const a = await collectInventory();
    const b = await collectInventory();
    useFakeNvidiaSmi(await scenario({ "inventory.csv": `${[...lines].reverse().join("\n")}\n` }));
    const reordered = await collectInventory();
    expect(reordered.gpus.map((g) => g.uuid)).toEqual([UUID_2, UUID_1, UUID_0]);
    expect(inventoryFingerprint(b)).toBe(inventoryFingerprint(a));
    expect(inventoryFingerprint(reordered)).toBe(inventoryFingerprint(a));
  });
});

describe("collectTelemetry", () => {
  it("measures memory, mounts and the three GPUs", async () => {
    useFakeNvidiaSmi(await scenario());
    const t = await collectTelemetry();
    expect(t.memoryTotalBytes).toBeGreaterThan(0n);
    expect(t.memoryUsedBytes).toBeGreaterThan(0n);
    expect(t.memoryUsedBytes).toBeLessThanOrEqual(t.memoryTotalBytes);
    for (const m of t.mounts) {
      expect(m.mount).not.toBe("");
      expect(m.usedBytes).toBeLessThanOrEqual(m.sizeBytes);
    }
    expect(t.gpus.map((g) => [g.uuid, g.utilizationPercent, g.memoryUsedBytes, g.temperatureCelsius, g.powerWatts])).toEqual([
      [UUID_0, 97, 71234n * MIB, 67, 389.41],
      [UUID_1, 0, 4n * MIB, 34, 61.87],
      [UUID_2, 42, 20480n * MIB, 51, 312.05],
    ]);
  });

  it("turns unavailable values into 0", async () => {
    useFakeNvidiaSmi(await scenario({ "telemetry.csv": `${UUID_0}, [N/A], 1024, [Not Supported], [N/A]\n` }));
    const t = await collectTelemetry();
    expect(t.gpus).toHaveLength(1);
    expect(t.gpus[0]).toMatchObject({
      uuid: UUID_0,
      utilizationPercent: 0,
      memoryUsedBytes: 1024n * MIB,
      temperatureCelsius: 0,
      powerWatts: 0,
    });
  });

  it("omits the GPUs, without throwing, when nvidia-smi fails", async () => {
    useFakeNvidiaSmi(await scenario({ "telemetry.csv": null, exit_code: "9", stderr: `${DRIVER_FAILED}\n` }));
    const t = await collectTelemetry();
    expect(t.gpus).toEqual([]);
    expect(t.memoryTotalBytes).toBeGreaterThan(0n);
  });

  it("omits the GPUs when nvidia-smi hangs past the timeout", async () => {
    useFakeNvidiaSmi(await scenario({ sleep_seconds: "30" }));
    const t = await collectTelemetry({ nvidiaSmiTimeoutMs: 200 });
    expect(t.gpus).toEqual([]);
  });

  it("has no GPUs when nvidia-smi is not on PATH", async () => {
    process.env.PATH = pathWithoutNvidiaSmi();
    const t = await collectTelemetry();
    expect(t.gpus).toEqual([]);
    expect(t.memoryTotalBytes).toBeGreaterThan(0n);
  });
});

// ---------------------------------------------------------------------------------------------
// Fingerprint.

describe("inventoryFingerprint", () => {
  const gpu = (uuid: string, index: number, driverVersion = "550.54.15") =>
    create(GpuInfoSchema, {
      uuid,
      index,
      pciBusId: `00000000:${index}B:00.0`,
      model: "NVIDIA H100 80GB HBM3",
      memoryTotalBytes: 81559n * MIB,
      driverVersion,
      vendor: "NVIDIA",
    });
  const host = (disks: [string, string, bigint][]) =>
    create(HostInfoSchema, {
      hostname: "gpu-node-01",
      osName: "Ubuntu",
      osVersion: "24.04",
      kernel: "6.8.0-45-generic",
      architecture: "x64",
      cpuModel: "AMD EPYC 9654",
      cpuCores: 192,
      memoryTotalBytes: 1_584_000_000_000n,
      disks: disks.map(([mount, filesystem, sizeBytes]) => create(DiskSchema, { mount, filesystem, sizeBytes })),
    });
  const base = {
    host: host([
      ["/", "ext4", 1_000n],
      ["/data", "xfs", 2_000n],
    ]),
    gpus: [gpu(UUID_0, 0), gpu(UUID_1, 1)],
    gpuCollectionComplete: true,
    gpuCollectionError: "",
  };

  it("is a hex SHA-256 that ignores GPU and disk order", () => {
    const fp = inventoryFingerprint(base);
    expect(fp).toMatch(/^[0-9a-f]{64}$/);
    expect(
      inventoryFingerprint({
        ...base,
        host: host([
          ["/data", "xfs", 2_000n],
          ["/", "ext4", 1_000n],
        ]),
        gpus: [gpu(UUID_1, 1), gpu(UUID_0, 0)],
      }),
    ).toBe(fp);
  });

  const changes: { name: string; change: Partial<typeof base> }[] = [
    { name: "a GPU disappears", change: { gpus: [gpu(UUID_0, 0)] } },
    { name: "a driver upgrade", change: { gpus: [gpu(UUID_0, 0, "555.42.02"), gpu(UUID_1, 1, "555.42.02")] } },
    { name: "GPU indices swap", change: { gpus: [gpu(UUID_0, 1), gpu(UUID_1, 0)] } },
    { name: "collection becomes incomplete", change: { gpuCollectionComplete: false, gpuCollectionError: "x" } },
    {
      name: "a disk is added",
      change: {
        host: host([
          ["/", "ext4", 1_000n],
          ["/data", "xfs", 2_000n],
          ["/scratch", "xfs", 5n],
        ]),
      },
    },
    {
      name: "a disk grows",
      change: {
        host: host([
          ["/", "ext4", 1_000n],
          ["/data", "xfs", 4_000n],
        ]),
      },
    },
  ];
  it.each(changes)("changes when $name", ({ change }) => {
    expect(inventoryFingerprint({ ...base, ...change })).not.toBe(inventoryFingerprint(base));
  });
});
