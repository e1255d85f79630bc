// Where the CLI connects and how: server URL, the CA that must have signed the server's
// certificate, and the operator's credential: a break-glass key (the admin header), a personal
// token (MODELFORGE_TOKEN), or the ID token `forge login` keeps. Flags win over environment.
import { readFileSync } from "node:fs";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { grpcTransport } from "../common/http2-sessions.js";
import { AdminService } from "../gen/proto/modelforge/admin/v1/admin_pb.js";
import { ConfigError } from "./usage-error.js";
import { currentIdToken, storedLogin } from "./login.js";

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

/** Where the control plane is, and the CA its certificate must chain to. */
export interface ServerConfig {
  server: string;
  caFile: string;
  caPem: string;
}

/** How the CLI says who it is, in the order it looks for them. */
export type Credential =
  | { kind: "break-glass"; adminKey: string }
  | { kind: "personal-token"; token: string }
  | { kind: "login"; idToken: () => Promise<string> };

export interface ConnectionConfig extends ServerConfig {
  credential: Credential;
}

export function resolveServer(flags: Omit<ConnectionFlags, "adminKey">, env: NodeJS.ProcessEnv): ServerConfig {
  const server = (flags.server ?? env.MODELFORGE_SERVER ?? "").trim() || defaultServer;
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    throw new ConfigError(`--server: "${server}" is not a URL (expected e.g. ${defaultServer})`);
  }
  if (url.protocol !== "https:") throw new ConfigError(`--server: the control plane only speaks TLS; use an https:// URL`);

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
  return { server: url.toString().replace(/\/$/, ""), caFile, caPem };
}

/** Checked here so that a malformed secret never reaches an HTTP/2 error message that might echo it. */
function headerSafe(secret: string, what: string): string {
  if (!/^[\x21-\x7e]+$/.test(secret)) throw new ConfigError(`${what} contains spaces or characters not allowed in a header`);
  return secret;
}

export function resolveConfig(flags: ConnectionFlags, env: NodeJS.ProcessEnv): ConnectionConfig {
  const where = resolveServer(flags, env);
  const adminKey = flags.adminKey ?? env.MODELFORGE_OPERATOR_API_KEY ?? "";
  if (adminKey !== "") return { ...where, credential: { kind: "break-glass", adminKey: headerSafe(adminKey, "the operator API key") } };
  const token = env.MODELFORGE_TOKEN ?? "";
  if (token !== "") return { ...where, credential: { kind: "personal-token", token: headerSafe(token, "MODELFORGE_TOKEN") } };
  if (storedLogin(env, where.server) !== undefined) {
    return { ...where, credential: { kind: "login", idToken: () => currentIdToken(env, where.server, Date.now()) } };
  }
  throw new ConfigError(
    `not signed in to ${where.server}: run forge login, or set MODELFORGE_TOKEN (a personal token) or MODELFORGE_OPERATOR_API_KEY (break-glass)`,
  );
}

export function createAdminClient(config: ConnectionConfig): AdminClient {
  const { credential } = config;
  const auth: Interceptor = (next) => async (req) => {
    if (credential.kind === "break-glass") req.header.set(adminTokenHeader, credential.adminKey);
    else if (credential.kind === "personal-token") req.header.set("authorization", `Bearer ${credential.token}`);
    else req.header.set("authorization", `Bearer ${await credential.idToken()}`);
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
