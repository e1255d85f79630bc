// MALLOC (servers) and WORKER_MALLOC (load generator): which C allocator a bench process runs with.
// OpenSSL 3.0 and nghttp2 allocate many small blocks per connection; glibc's malloc showed as
// 13 % (servers) and 26 % (load generator) of on-CPU samples during session opens (perf), so the
// allocator is a variable worth measuring. Preloaded from Debian's packages (libjemalloc2,
// libtcmalloc-minimal4, libmimalloc2.0); "glibc" is the system's own.
import { existsSync } from "node:fs";
import { serverAllocator } from "../../server/tuning.js";

const libraries: Record<string, string> = {
  [serverAllocator.name]: serverAllocator.library,
  tcmalloc: "libtcmalloc_minimal.so.4",
  mimalloc: "libmimalloc.so.2",
};

const multiarch = process.arch === "arm64" ? "aarch64-linux-gnu" : "x86_64-linux-gnu";

/** The environment that makes a child process use `name`; throws if its library is not installed. */
export function allocatorEnv(name: string): Record<string, string> {
  if (name === "glibc") return {};
  const file = libraries[name];
  if (file === undefined) throw new Error(`unknown allocator ${name}: glibc, ${Object.keys(libraries).join(", ")}`);
  const path = `/usr/lib/${multiarch}/${file}`;
  if (!existsSync(path)) throw new Error(`${name} is not installed (${path}); apt-get install it or use glibc`);
  return { LD_PRELOAD: path };
}
