// Where the CLI connects and how: server URL, the CA that must have signed the server's
// certificate, and the operator API key sent in the admin header. Flags win over environment.
import { readFileSync } from "node:fs";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { grpcTransport } from "../common/http2-sessions.js";
import { AdminService } from "../gen/proto/modelforge/admin/v1/admin_pb.js";
import { UsageError } from "./usage-error.js";

export type AdminClient = Client<typeof AdminService>;

export const adminTokenHeader = "x-modelforge-admin-token";
export const defaultServer = "https://127.0.0.1:8443";
export const defaultCaFile = "./certs/ca.crt";
/** Unary calls give up after this long; streams have no deadline. */
export const unaryTimeoutMs = 30_000;

export interface ConnectionFlags {
  server?: string;
  ca?: string;
  adminKey?: string;
}

export interface ConnectionConfig {
  server: string;
  caFile: string;
  caPem: string;
  adminKey: string;
}

/** A configuration problem that is not the user's syntax: exit 2 as well, but phrased differently. */
export class ConfigError extends UsageError {
  override name = "ConfigError";
}

export function resolveConfig(flags: ConnectionFlags, env: NodeJS.ProcessEnv): ConnectionConfig {
  const server = (flags.server ?? env.MODELFORGE_SERVER ?? "").trim() || defaultServer;
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    throw new ConfigError(`--server: "${server}" is not a URL (expected e.g. ${defaultServer})`);
  }
  if (url.protocol !== "https:") throw new ConfigError(`--server: the control plane only speaks TLS; use an https:// URL`);

  const adminKey = flags.adminKey ?? env.MODELFORGE_OPERATOR_API_KEY ?? "";
  if (adminKey === "") {
    throw new ConfigError("no operator API key: set MODELFORGE_OPERATOR_API_KEY (or pass --admin-key)");
  }
  // Checked here so that a malformed key never reaches an HTTP/2 error message that might echo it.
  if (!/^[\x21-\x7e]+$/.test(adminKey)) {
    throw new ConfigError("the operator API key contains spaces or characters not allowed in a header");
  }

  const caFile = (flags.ca ?? env.MODELFORGE_CA_FILE ?? "").trim() || defaultCaFile;
  let caPem: string;
  try {
    caPem = readFileSync(caFile, "utf8");
  } catch (err) {
    const reason = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new ConfigError(`cannot read the CA certificate ${caFile} (${reason}); set --ca or MODELFORGE_CA_FILE`);
  }
  if (!caPem.includes("-----BEGIN CERTIFICATE-----")) {
    throw new ConfigError(`${caFile} does not contain a PEM certificate`);
  }
  return { server: url.toString().replace(/\/$/, ""), caFile, caPem, adminKey };
}

export function createAdminClient(config: ConnectionConfig): AdminClient {
  const auth: Interceptor = (next) => (req) => {
    req.header.set(adminTokenHeader, config.adminKey);
    return next(req);
  };
  return createClient(
    AdminService,
    grpcTransport({
      baseUrl: config.server,
      nodeOptions: { ca: config.caPem },
      interceptors: [auth],
      defaultTimeoutMs: unaryTimeoutMs,
    }),
  );
}
