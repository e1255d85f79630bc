// The node's filesystems and their usage, read without starting a process. systeminformation's
// fsSize runs `cat /proc/mounts` with execSync and `df` with exec on every call: the first holds the
// agent's event loop, and each fork of a large process is a stall of its own. Telemetry and the
// inventory read mounts every round, so every request the agent was relaying waited behind them
// (bench/openai.ts: an 88 ms stall in a 5 s window, the added p99). On Linux the kernel's mount
// table and statfs(2) (through libuv's thread pool) say the same as df; elsewhere systeminformation
// stays.
import { readFile, statfs } from "node:fs/promises";
import si from "systeminformation";

/** A mounted filesystem worth measuring: its device, where it is mounted, and its type. */
export interface MountPoint {
  device: string;
  mount: string;
  type: string;
}

/** One filesystem's size and use, in bytes. */
export interface FsUsage {
  mount: string;
  type: string;
  size: number;
  used: number;
}

/** Kernel-backed and in-memory types that hold no node storage, as systeminformation leaves them out. */
const memoryTypes = [
  "rootfs",
  "unionfs",
  "squashfs",
  "cramfs",
  "initrd",
  "initramfs",
  "devtmpfs",
  "tmpfs",
  "udev",
  "devfs",
  "specfs",
  "appimaged",
];

/** /proc/mounts escapes space, tab, newline and backslash as three octal digits. */
const unescapeMountField = (field: string) =>
  field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(Number.parseInt(octal, 8)));

/**
 * The mounts of /proc/mounts worth measuring, one per mount point (the last listed: a later mount
 * over the same point hides the earlier). A block device, a network share (`host:/export`) or
 * any type that is not in-memory is kept; squashfs (snap images, always full) is not. Pseudo
 * filesystems (proc, sysfs, cgroup) pass this rule and are dropped later for their size of 0, as
 * df drops them. Pure.
 */
export function parseProcMounts(text: string): MountPoint[] {
  const byMount = new Map<string, MountPoint>();
  for (const line of text.split("\n")) {
    const [rawDevice, rawMount, type] = line.trim().split(/\s+/);
    if (rawDevice === undefined || rawMount === undefined || type === undefined) continue;
    const device = unescapeMountField(rawDevice);
    const mount = unescapeMountField(rawMount);
    if (!mount.startsWith("/") || type === "squashfs") continue;
    const inMemory = memoryTypes.some((t) => type.toLowerCase().includes(t));
    if (device.startsWith("/") || mount === "/" || device.indexOf("/") > 0 || !inMemory) {
      byMount.delete(mount);
      byMount.set(mount, { device, mount, type });
    }
  }
  return [...byMount.values()];
}

export interface MountReader {
  platform: NodeJS.Platform;
  readMountTable(): Promise<string>;
  statfs(mount: string): Promise<{ bsize: number; blocks: number; bfree: number }>;
  /** What other platforms use. */
  fsSize(): Promise<FsUsage[]>;
}

const systemReader: MountReader = {
  platform: process.platform,
  readMountTable: () => readFile("/proc/mounts", "utf8"),
  statfs: (mount) => statfs(mount),
  fsSize: () => si.fsSize(),
};

/** How long one statfs may take before its mount is left out of the round (a hung network share). */
const STATFS_TIMEOUT_MS = 2_000;

/**
 * Each measurable filesystem's size and use. A mount that cannot be measured in time is left out;
 * never rejects. A statfs that has not returned holds one of libuv's few threads: a mount is asked
 * again only once its last answer came, so a hung share holds one thread, not one per round.
 */
export async function readFsUsage(reader: MountReader = systemReader, timeoutMs = STATFS_TIMEOUT_MS): Promise<FsUsage[]> {
  try {
    if (reader.platform !== "linux") return await reader.fsSize();
    const mounts = parseProcMounts(await reader.readMountTable());
    const measured = await Promise.all(mounts.map((m) => measure(reader, m, timeoutMs)));
    return measured.filter((m): m is FsUsage => m !== undefined);
  } catch {
    return [];
  }
}

/** Mounts whose statfs has not returned yet, per reader. */
const unanswered = new WeakMap<MountReader, Set<string>>();

async function measure(reader: MountReader, m: MountPoint, timeoutMs: number): Promise<FsUsage | undefined> {
  const waiting = unanswered.get(reader) ?? new Set<string>();
  unanswered.set(reader, waiting);
  if (waiting.has(m.mount)) return undefined;
  waiting.add(m.mount);
  const asked = reader.statfs(m.mount).finally(() => waiting.delete(m.mount));
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(resolve, timeoutMs, undefined);
  });
  try {
    const s = await Promise.race([asked, late]);
    if (s === undefined || s.blocks <= 0) return undefined;
    return { mount: m.mount, type: m.type, size: s.blocks * s.bsize, used: (s.blocks - s.bfree) * s.bsize };
  } catch {
    // Unmounted meanwhile, or not ours to read.
    return undefined;
  } finally {
    clearTimeout(timer);
    asked.catch(() => undefined);
  }
}
