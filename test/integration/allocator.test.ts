// Which allocator a process runs with, read from its memory map (server/observability/allocator.ts).
import { describe, expect, it } from "vitest";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { allocatorIn, processAllocator } from "../../server/observability/allocator.js";

const libc = "7f0a1c000000-7f0a1c028000 r--p 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libc.so.6\n";
const line = (path: string) => `7f0a1d000000-7f0a1d010000 r-xp 00000000 08:01 99 ${path}\n`;

describe("allocatorIn", () => {
  it.each([
    ["glibc alone", libc, "libc"],
    ["jemalloc preloaded", line("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2") + libc, "jemalloc"],
    ["tcmalloc minimal", line("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4.5.10") + libc, "tcmalloc"],
    ["tcmalloc", line("/usr/lib64/libtcmalloc.so.4") + libc, "tcmalloc"],
    ["mimalloc", line("/usr/lib/x86_64-linux-gnu/libmimalloc.so.2.0") + libc, "mimalloc"],
    // A file that merely mentions a name is not the library.
    ["a data file named like it", line("/var/lib/data/notlibjemalloc.so.bak") + libc, "libc"],
  ])("%s", (_name, maps, expected) => {
    expect(allocatorIn(maps)).toBe(expected);
  });

  it("is unknown where the map cannot be read", () => {
    expect(
      processAllocator(() => {
        throw new Error("ENOENT");
      }),
    ).toBe("unknown");
  });
});

const jemalloc = ["/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2"].find((p) => existsSync(p));

describe("processAllocator in a real process", () => {
  const probe = (env: NodeJS.ProcessEnv) =>
    spawnSync(
      process.execPath,
      ["--import", "tsx", "-e", 'import("./server/observability/allocator.ts").then((m) => console.log(m.processAllocator()))'],
      {
        env: { ...process.env, ...env },
        encoding: "utf8",
      },
    ).stdout.trim();

  it("says libc without a preload", () => {
    expect(probe({ LD_PRELOAD: "" })).toBe("libc");
  });

  it.skipIf(jemalloc === undefined)("says jemalloc with it preloaded", () => {
    expect(probe({ LD_PRELOAD: jemalloc })).toBe("jemalloc");
  });
});
