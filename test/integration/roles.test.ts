// Operator roles, for every AdminService method in the contract: the table (viewer, operator, admin,
// and the user-only ACCESS_SELF) through the interceptor for every kind of caller, and over the
// real server for the break-glass keys: the admin key may call every method but the user-only ones,
// the read-only key exactly those declared ACCESS_READ (every other is permission_denied, at the
// edge and again in the interceptor). A method added without an access option fails here. Users'
// roles over the real server, with a real identity provider: test/integration/operators.test.ts.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, hasOption } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, createRouterTransport, type Client } from "@connectrpc/connect";
import { AdminService, OperatorRole } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { Access, access } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import { accessTable, mayCall, type Grant } from "../../server/identity/roles.js";
import { adminAuthInterceptor } from "../../server/identity/operators/interceptor.js";
import { LiveOperatorCalls } from "../../server/identity/operators/live-calls.js";
import type { Principal } from "../../server/identity/operators/principal.js";
import { runCli } from "../../cli/cli.js";
import { adminTransport, startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { callEmpty } from "../support/operators.js";

const readOnlyKey = "test-read-only-key-0123456789ab";
const methods = AdminService.methods;
const table = accessTable(AdminService);
const reads = methods.filter((m) => table.get(m.name) === Access.READ);
const writes = methods.filter((m) => table.get(m.name) !== Access.READ);
const selfOnly = methods.filter((m) => table.get(m.name) === Access.SELF);

describe("the access table from the contract", () => {
  it.each(methods.map((m) => [m.name, m] as const))("%s declares its access", (_name, m) => {
    expect(hasOption(m, access)).toBe(true);
    expect([Access.READ, Access.OPERATE, Access.WRITE, Access.SELF]).toContain(table.get(m.name));
  });

  it("reads are exactly the List, Get, Watch and Preview methods", () => {
    // A cross-check of names against the option: a mutating method named like a read (or the
    // reverse) is a mistake in one of the two.
    expect(reads.map((m) => m.name).sort()).toEqual(
      methods
        .filter((m) => /^(List|Get|Watch|Preview)/.test(m.name) && !selfOnly.includes(m))
        .map((m) => m.name)
        .sort(),
    );
    expect(writes.length).toBeGreaterThan(0);
  });

  it("acting on one's own identity is exactly the personal token methods", () => {
    expect(selfOnly.map((m) => m.name).sort()).toEqual(["CreatePersonalToken", "ListPersonalTokens", "RevokePersonalToken"]);
  });

  const grant = (role: Grant["role"], user = true): Grant => ({ role, user });
  it.each([
    // [who, access, may call]
    [grant("admin"), Access.WRITE, true],
    [grant("admin"), Access.OPERATE, true],
    [grant("admin"), undefined, true],
    [grant("operator"), Access.OPERATE, true],
    [grant("operator"), Access.READ, true],
    [grant("operator"), Access.WRITE, false],
    [grant("operator"), Access.UNSPECIFIED, false],
    [grant("viewer"), Access.READ, true],
    [grant("viewer"), Access.OPERATE, false],
    [grant("viewer"), Access.WRITE, false],
    [grant("viewer"), undefined, false],
    [grant("viewer"), Access.SELF, true],
    [grant("admin", false), Access.WRITE, true],
    [grant("admin", false), Access.SELF, false],
    [grant("viewer", false), Access.SELF, false],
  ] as const)("%o may call %s: %s", (g, a, may) => {
    expect(mayCall(g, a)).toBe(may);
  });
});

describe("the interceptor, without the edge in front", () => {
  // Every method answers; only authorization can refuse.
  const impl = Object.fromEntries(
    methods.map((m) => [
      m.localName,
      m.methodKind === "server_streaming"
        ? async function* () {
            yield create(m.output);
          }
        : async () => create(m.output),
    ]),
  );
  const user = (role: Grant["role"]): Principal => ({
    kind: "user",
    userId: "u",
    email: "u@example.com",
    name: "U",
    role,
    credential: "oidc",
  });
  const callers: [string, Principal][] = [
    ["break-glass admin", { kind: "break-glass", role: "admin" }],
    ["break-glass viewer", { kind: "break-glass", role: "viewer" }],
    ["admin", user("admin")],
    ["operator", user("operator")],
    ["viewer", user("viewer")],
  ];
  const clientAs = (principal: Principal) =>
    createClient(
      AdminService,
      createRouterTransport(({ service }) => service(AdminService, impl), {
        router: { interceptors: [adminAuthInterceptor({ authenticate: async () => principal }, new LiveOperatorCalls())] },
      }),
    );
  const expected: Record<string, (a: Access | undefined) => boolean> = {
    "break-glass admin": (a) => a !== Access.SELF,
    "break-glass viewer": (a) => a === Access.READ,
    admin: () => true,
    operator: (a) => a === Access.READ || a === Access.OPERATE || a === Access.SELF,
    viewer: (a) => a === Access.READ || a === Access.SELF,
  };
  it.each(methods.map((m) => [m.name, m] as const))("%s", async (_name, m) => {
    for (const [who, principal] of callers) {
      const want = expected[who]!(table.get(m.name)) ? "ok" : Code.PermissionDenied;
      expect(await callEmpty(clientAs(principal), m), who).toBe(want);
    }
  });
});

describe("roles over the real server", () => {
  let ts: TestServer;
  let admin: Client<typeof AdminService>;
  let readOnly: Client<typeof AdminService>;
  beforeAll(async () => {
    ts = await startTestServer({ MODELFORGE_OPERATOR_READONLY_KEY: readOnlyKey });
    admin = ts.admin;
    readOnly = createClient(AdminService, adminTransport(ts.url, ts.caPem, readOnlyKey));
  });
  afterAll(() => ts.stop());

  it.each(writes.map((m) => [m.name, m] as const))("read-only key: %s is permission_denied, and changes nothing", async (_name, m) => {
    const before = (await admin.listAuditEvents({})).events.length;
    expect(await callEmpty(readOnly, m)).toBe(Code.PermissionDenied);
    expect((await admin.listAuditEvents({})).events.length).toBe(before);
  });

  it.each(reads.map((m) => [m.name, m] as const))("read-only key: %s is allowed", async (_name, m) => {
    // An empty request may be invalid for a Get (no id): anything but an auth refusal is fine.
    const code = await callEmpty(readOnly, m);
    expect(code).not.toBe(Code.PermissionDenied);
    expect(code).not.toBe(Code.Unauthenticated);
  });

  it.each(selfOnly.map((m) => [m.name, m] as const))("admin key: %s is for users only", async (_name, m) => {
    expect(await callEmpty(admin, m)).toBe(Code.PermissionDenied);
  });

  it.each(methods.filter((m) => !selfOnly.includes(m)).map((m) => [m.name, m] as const))("admin key: %s is allowed", async (_name, m) => {
    const code = await callEmpty(admin, m);
    expect(code).not.toBe(Code.PermissionDenied);
    expect(code).not.toBe(Code.Unauthenticated);
  });

  it("forge works with the read-only key for reads and says why a write is refused", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mf-roles-cli-"));
    try {
      writeFileSync(join(dir, "ca.crt"), ts.caPem);
      const forge = async (args: string[]) => {
        let out = "";
        const sink = new Writable({
          write(chunk: Buffer, _enc, cb) {
            out += chunk.toString();
            cb();
          },
        });
        const stdin = new PassThrough();
        stdin.end();
        const env = { MODELFORGE_SERVER: ts.url, MODELFORGE_CA_FILE: join(dir, "ca.crt"), MODELFORGE_OPERATOR_API_KEY: readOnlyKey };
        const code = await runCli(args, { stdout: sink, stderr: sink, stdin, env, signal: new AbortController().signal });
        return { code, out };
      };
      expect((await forge(["nodes", "list"])).code).toBe(0);
      const refused = await forge(["tokens", "create", "--name", "x"]);
      expect(refused.code).toBe(1);
      expect(refused.out).toMatch(/permission_denied/);
      expect(refused.out).toMatch(/CreateEnrollmentToken changes identity or fleet membership and needs the admin role/);
      expect(refused.out).not.toContain(readOnlyKey);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("names the caller's role", async () => {
    expect((await admin.getOperatorRole({})).role).toBe(OperatorRole.ADMIN);
    expect((await readOnly.getOperatorRole({})).role).toBe(OperatorRole.READ_ONLY);
  });

  it("refuses a write before reading its body, and never logs the key", async () => {
    const err = await readOnly.createEnrollmentToken({ nodeName: "x".repeat(100) }).catch((e: unknown) => ConnectError.from(e));
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).rawMessage).toMatch(/CreateEnrollmentToken changes identity or fleet membership/);
    expect(ts.logs()).toMatch(/rpc refused at the edge/);
    expect(ts.logs()).not.toContain(readOnlyKey);
    expect(ts.logs()).not.toContain(testAdminKey);
  });
});
