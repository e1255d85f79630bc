// Starts a real control plane for a test: its own temp data and certs directories, its own
// database, a random loopback port, short thresholds. Log lines are captured so tests can scan them.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { grpcTransport } from "../../common/http2-sessions.js";
import { loadConfig, type Config } from "../../server/config.js";
import { createLogger } from "../../server/observability/logger.js";
import { startServer, type RunningServer, type StartOptions } from "../../server/app.js";
import { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { AgentService } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { createTestDatabase } from "./db.js";
import { TextFeed } from "./wait.js";

export const testAdminKey = "test-admin-key-0123456789abcdef";

export interface TestServer {
  server: RunningServer;
  config: Config;
  url: string;
  caPem: string;
  /** Every log line written so far, as text. */
  logs(): string;
  /** The log as it grows: wait for a line with logFeed.waitForMatch. */
  logFeed: TextFeed;
  admin: Client<typeof AdminService>;
  /** An AgentService client without a client certificate. */
  anonymousAgent: Client<typeof AgentService>;
  stop(): Promise<void>;
}

export async function startTestServer(env: Record<string, string> = {}, options: StartOptions = {}): Promise<TestServer> {
  const dir = mkdtempSync(join(tmpdir(), "mf-server-"));
  const db = await createTestDatabase();
  const config = loadConfig({
    MODELFORGE_LISTEN_ADDRESS: "127.0.0.1",
    MODELFORGE_PORT: "0",
    MODELFORGE_DATA_DIR: db.dataDir,
    MODELFORGE_CERTS_DIR: join(dir, "certs"),
    MODELFORGE_OPERATOR_API_KEY: testAdminKey,
    MODELFORGE_LOG_LEVEL: "debug",
    MODELFORGE_LIVENESS_FLUSH_INTERVAL: "100ms",
    MODELFORGE_RECONCILE_INTERVAL: "100ms",
    MODELFORGE_SHUTDOWN_GRACE: "1s",
    ...(db.databaseUrl !== undefined ? { DATABASE_URL: db.databaseUrl } : {}),
    ...env,
  });
  const logFeed = new TextFeed();
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      logFeed.append(chunk.toString("utf8"));
      cb();
    },
  });
  const server = await startServer(config, createLogger("debug", sink), options);
  const admin = createClient(AdminService, adminTransport(server.url, server.ca.certPem, testAdminKey));
  const anonymousAgent = createClient(AgentService, grpcTransport({ baseUrl: server.url, nodeOptions: { ca: server.ca.certPem } }));
  let stopped = false;
  return {
    server,
    config,
    url: server.url,
    caPem: server.ca.certPem,
    logs: () => logFeed.toString(),
    logFeed,
    admin,
    anonymousAgent,
    async stop() {
      if (stopped) return;
      stopped = true;
      // A stop that hangs is a bug to name, not a hook timeout to guess at.
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        server.stop(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error("the control plane did not stop within 30 s")), 30_000);
        }),
      ]).finally(() => clearTimeout(timer));
      await db.cleanup();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export function adminTransport(url: string, caPem: string, key: string | undefined) {
  return headerTransport(url, caPem, key !== undefined ? { "x-modelforge-admin-token": key } : {});
}

/** A gRPC transport to the server that sends these headers with every call (a credential). */
export function headerTransport(url: string, caPem: string, headers: Record<string, string>) {
  const auth: Interceptor = (next) => (req) => {
    for (const [name, value] of Object.entries(headers)) req.header.set(name, value);
    return next(req);
  };
  return grpcTransport({ baseUrl: url, nodeOptions: { ca: caPem }, interceptors: [auth] });
}

/**
 * Two control-plane replicas on one PostgreSQL database, sharing their certificates and artifact
 * store (shared storage in production); `root` is the approved root of the store and of what the
 * agents acquire; `env` is added to both.
 */
export async function startTwoPlanes(
  databaseUrl: string,
  root: string,
  env: Record<string, string> = {},
): Promise<[TestServer, TestServer]> {
  const common = {
    DATABASE_URL: databaseUrl,
    MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
    MODELFORGE_APPROVED_ROOTS: root,
    MODELFORGE_ARTIFACT_DIR: join(root, "store"),
    ...env,
  };
  const a = await startTestServer(common);
  const b = await startTestServer({ ...common, MODELFORGE_CERTS_DIR: a.config.certsDir });
  return [a, b];
}
