// The agent's mount table and usage, read without a child process (agent/collectors/mounts.ts).
import { execFileSync } from "node:child_process";
import { statfs } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { parseProcMounts, readFsUsage, type MountReader } from "../../agent/collectors/mounts.js";

describe("parseProcMounts", () => {
  it.each([
    ["a block device", "/dev/vda / ext4 rw,relatime 0 0", [{ device: "/dev/vda", mount: "/", type: "ext4" }]],
    ["a network share", "nas:/models /srv/models nfs4 rw 0 0", [{ device: "nas:/models", mount: "/srv/models", type: "nfs4" }]],
    [
      "an escaped space in the mount point",
      "/dev/sdb1 /mnt/model\\040store xfs rw 0 0",
      [{ device: "/dev/sdb1", mount: "/mnt/model store", type: "xfs" }],
    ],
    ["a pseudo filesystem, left for its size of 0", "proc /proc proc rw 0 0", [{ device: "proc", mount: "/proc", type: "proc" }]],
    ["tmpfs", "tmpfs /dev/shm tmpfs rw 0 0", []],
    ["devtmpfs", "devtmpfs /dev devtmpfs rw 0 0", []],
    ["a squashfs image", "/dev/loop3 /snap/core/1 squashfs ro 0 0", []],
    ["a tmpfs named like a path", "none /run/x tmpfs rw 0 0", []],
    ["a line cut short", "/dev/vda /", []],
    ["a mount point that is not a path", "/dev/vda none ext4 rw 0 0", []],
  ])("%s", (_, text, want) => {
    expect(parseProcMounts(text)).toEqual(want);
  });

  it("keeps the last of two mounts on one point, the one that hides the other", () => {
    const text = ["/dev/sda1 /data ext4 rw 0 0", "/dev/sdb1 /data xfs rw 0 0", "/dev/vda / ext4 rw 0 0", ""].join("\n");
    expect(parseProcMounts(text)).toEqual([
      { device: "/dev/sdb1", mount: "/data", type: "xfs" },
      { device: "/dev/vda", mount: "/", type: "ext4" },
    ]);
  });
});

/** A Linux reader over a given mount table, its statfs answered by `answer`. */
function reader(table: string, answer: (mount: string) => Promise<{ bsize: number; blocks: number; bfree: number }>) {
  const asked: string[] = [];
  const r: MountReader = {
    platform: "linux",
    readMountTable: async () => table,
    statfs: (mount) => {
      asked.push(mount);
      return answer(mount);
    },
    fsSize: async () => {
      throw new Error("not on Linux");
    },
  };
  return { r, asked };
}

describe("readFsUsage", () => {
  it.runIf(process.platform === "linux")("measures / as df does, on this machine", async () => {
    const usage = await readFsUsage();
    const root = usage.find((u) => u.mount === "/");
    const [, line] = execFileSync("df", ["-kP", "/"], { encoding: "utf8" }).trim().split("\n");
    const dfKib = Number(line!.trim().split(/\s+/)[1]);
    expect(root?.size).toBe(dfKib * 1024);
    // Use moves while the suite writes files: within 1 % of the disk of a statfs a moment later.
    const s = await statfs("/");
    expect(Math.abs(root!.used - (s.blocks - s.bfree) * s.bsize)).toBeLessThan(root!.size / 100);
    expect(usage.every((u) => u.size > 0)).toBe(true);
  });

  it("sizes each mount from statfs and leaves out those of size 0 and those it cannot read", async () => {
    const { r } = reader("/dev/vda / ext4 rw 0 0\nproc /proc proc rw 0 0\n/dev/sdb /gone ext4 rw 0 0\n", async (mount) => {
      if (mount === "/gone") throw Object.assign(new Error("ENOENT"), { code: "ENOENT" });
      return mount === "/" ? { bsize: 4096, blocks: 100, bfree: 25 } : { bsize: 4096, blocks: 0, bfree: 0 };
    });
    expect(await readFsUsage(r)).toEqual([{ mount: "/", type: "ext4", size: 409_600, used: 307_200 }]);
  });

  it("answers without a mount whose statfs hangs, and does not ask it again until it returns", async () => {
    let release = () => {};
    const hung = new Promise<{ bsize: number; blocks: number; bfree: number }>((resolve) => {
      release = () => resolve({ bsize: 1024, blocks: 10, bfree: 5 });
    });
    const { r, asked } = reader("/dev/vda / ext4 rw 0 0\nnas:/m /srv/m nfs rw 0 0\n", (mount) =>
      mount === "/srv/m" ? hung : Promise.resolve({ bsize: 1024, blocks: 8, bfree: 4 }),
    );
    const first = await readFsUsage(r, 50);
    const second = await readFsUsage(r, 50);
    expect([first, second].map((u) => u.map((m) => m.mount))).toEqual([["/"], ["/"]]);
    expect(asked.filter((m) => m === "/srv/m")).toHaveLength(1);
    release();
    await hung;
    await new Promise((resolve) => setImmediate(resolve));
    expect((await readFsUsage(r, 5_000)).map((m) => m.mount)).toEqual(["/", "/srv/m"]);
  });

  it("asks systeminformation on other platforms", async () => {
    const r: MountReader = {
      platform: "darwin",
      readMountTable: async () => {
        throw new Error("no /proc here");
      },
      statfs: async () => {
        throw new Error("not asked");
      },
      fsSize: async () => [{ mount: "/", type: "apfs", size: 10, used: 5 }],
    };
    expect(await readFsUsage(r)).toEqual([{ mount: "/", type: "apfs", size: 10, used: 5 }]);
  });

  it("answers [] when the mount table cannot be read", async () => {
    const { r } = reader("", async () => ({ bsize: 1, blocks: 1, bfree: 1 }));
    r.readMountTable = async () => {
      throw new Error("EACCES");
    };
    expect(await readFsUsage(r)).toEqual([]);
  });
});
