// Which C allocator this process runs with, read from its own memory map. The installed unit
// preloads jemalloc (server/tuning.ts), and ld.so only warns when a preload is missing, so the
// startup log says which allocator is really in use.
import { readFileSync } from "node:fs";

const known: [RegExp, string][] = [
  [/\/libjemalloc\.so/, "jemalloc"],
  [/\/libtcmalloc(_minimal)?\.so/, "tcmalloc"],
  [/\/libmimalloc\.so/, "mimalloc"],
];

/** The allocator a /proc/<pid>/maps text shows loaded: a preloaded one by name, otherwise the C library's. */
export function allocatorIn(maps: string): string {
  for (const [pattern, name] of known) if (pattern.test(maps)) return name;
  return "libc";
}

/** This process's allocator; "unknown" where there is no /proc (not Linux). */
export function processAllocator(read: () => string = () => readFileSync("/proc/self/maps", "utf8")): string {
  try {
    return allocatorIn(read());
  } catch {
    return "unknown";
  }
}
