// Bench-only: the environment of a control plane a benchmark forks on loopback, its state under `dir`.
import { join } from "node:path";

export function benchServerEnv(dir: string, adminKey: string, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return {
    ...process.env,
    MODELFORGE_LISTEN_ADDRESS: "127.0.0.1",
    MODELFORGE_PORT: "0",
    MODELFORGE_DATA_DIR: join(dir, "data"),
    MODELFORGE_CERTS_DIR: join(dir, "certs"),
    MODELFORGE_OPERATOR_API_KEY: adminKey,
    ...extra,
  };
}
