// Operators signed in through a test identity provider (./oidc.ts): the control plane's SSO
// settings for it, and admin clients that present a bearer token (an ID token or a personal token).
import { create, type DescMethod } from "@bufbuild/protobuf";
import { ConnectError, createClient, type Client, type Code } from "@connectrpc/connect";
import { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildConsole, openConsoleBrowser, requireChromium, type ConsoleBrowser } from "./browser.js";
import { startOidcProvider, type OidcUser, type TestProvider } from "./oidc.js";
import { headerTransport, startTestServer, type TestServer } from "./server.js";

/** The groups the tests' provider gives, mapped to roles as an operator would map theirs. */
export const testUsers: Record<string, OidcUser> = {
  alice: { email: "alice@example.com", name: "Alice Admin", groups: ["mf-admins", "staff"] },
  oscar: { email: "oscar@example.com", name: "Oscar Operator", groups: ["mf-ops"] },
  vera: { email: "vera@example.com", name: "Vera Viewer", groups: ["mf-viewers"] },
  nobody: { email: "nobody@example.com", name: "No Body", groups: ["staff"] },
};

export function ssoEnv(provider: TestProvider): Record<string, string> {
  return {
    MODELFORGE_OIDC_ISSUER: provider.issuer,
    MODELFORGE_OIDC_CLIENT_ID: provider.consoleClient.id,
    MODELFORGE_OIDC_CLIENT_SECRET: provider.consoleClient.secret,
    MODELFORGE_OIDC_CLI_CLIENT_ID: provider.cliClientId,
    MODELFORGE_OIDC_SCOPES: "openid profile email groups",
    MODELFORGE_OIDC_ROLES: "mf-admins=admin,mf-ops=operator,mf-viewers=viewer",
  };
}

export function bearerClient(url: string, caPem: string, token: string): Client<typeof AdminService> {
  return headerClient(url, caPem, "authorization", `Bearer ${token}`);
}

/** A client that presents the web console's session cookie, as the console's own calls do. */
export function sessionClient(url: string, caPem: string, session: string): Client<typeof AdminService> {
  return headerClient(url, caPem, "cookie", `__Host-modelforge-session=${session}`);
}

function headerClient(url: string, caPem: string, name: string, value: string): Client<typeof AdminService> {
  return createClient(AdminService, headerTransport(url, caPem, { [name]: value }));
}

/** Calls any method with an empty request; for a server stream, the first message only. */
export async function callEmpty(client: Client<typeof AdminService>, method: DescMethod): Promise<Code | "ok"> {
  const fn = (client as unknown as Record<string, (req: unknown, opts?: unknown) => unknown>)[method.localName]!;
  const abort = new AbortController();
  try {
    if (method.methodKind === "server_streaming") {
      // A watch of an empty fleet sends nothing: a stream still open after a second was accepted.
      const timer = setTimeout(() => abort.abort(), 1_000);
      try {
        for await (const _ of fn(create(method.input), { signal: abort.signal }) as AsyncIterable<unknown>) break;
      } catch (err) {
        if (!abort.signal.aborted) throw err;
      } finally {
        clearTimeout(timer);
      }
    } else {
      await fn(create(method.input));
    }
    return "ok";
  } catch (err) {
    return ConnectError.from(err).code;
  } finally {
    abort.abort();
  }
}

/** A provider, a control plane signing in through it (the console built, when asked), and Chromium in the user's place. */
export interface SignInStack {
  provider: TestProvider;
  ts: TestServer;
  web: ConsoleBrowser;
  /** The stack's folder: the CA file (`ca.crt`), the console, the browser's profile. */
  dir: string;
  stop(): Promise<void>;
}

export async function startSignInStack(suite: string, options: { console?: boolean; deviceFlow?: boolean } = {}): Promise<SignInStack> {
  requireChromium();
  const dir = mkdtempSync(join(tmpdir(), `mf-${suite}-`));
  if (options.console) await buildConsole(join(dir, "ui"));
  let ts: TestServer | undefined;
  const provider = await startOidcProvider({
    consoleRedirectUri: () => `${ts!.url}/auth/callback`,
    users: testUsers,
    ...(options.deviceFlow !== undefined ? { deviceFlow: options.deviceFlow } : {}),
  });
  ts = await startTestServer({ ...ssoEnv(provider), ...(options.console ? { MODELFORGE_UI_DIR: join(dir, "ui") } : {}) });
  writeFileSync(join(dir, "ca.crt"), ts.caPem);
  const web = await openConsoleBrowser(ts.url, dir, suite);
  const server = ts;
  return {
    provider,
    ts: server,
    web,
    dir,
    async stop() {
      await web.close();
      await server.stop();
      await provider.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
