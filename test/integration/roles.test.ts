// Operator roles, for every AdminService method in the contract: the admin key may call each one,
// the read-only key exactly those declared ACCESS_READ (every other is permission_denied, at the
// edge and again in the interceptor). A method added without an access option fails here.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, hasOption, type DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, createRouterTransport, type Client } from "@connectrpc/connect";
import { AdminService, OperatorRole } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { Access, access } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import { accessTable, mayCall } from "../../server/identity/roles.js";
import { adminAuthInterceptor } from "../../server/identity/admin-token.js";
import { runCli } from "../../cli/cli.js";
import { adminTransport, startTestServer, testAdminKey, type TestServer } from "../support/server.js";

const readOnlyKey = "test-read-only-key-0123456789ab";
const methods = AdminService.methods;
const table = accessTable(AdminService);
const reads = methods.filter((m) => table.get(m.name) === Access.READ);
const writes = methods.filter((m) => table.get(m.name) !== Access.READ);

/** Calls any method with an empty request; for a server stream, the first message only. */
async function callEmpty(client: Client<typeof AdminService>, method: DescMethod): Promise<Code | "ok"> {
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

describe("the access table from the contract", () => {
  it.each(methods.map((m) => [m.name, m] as const))("%s declares its access", (_name, m) => {
    expect(hasOption(m, access)).toBe(true);
    expect([Access.READ, Access.WRITE]).toContain(table.get(m.name));
  });

  it("reads are exactly the List, Get, Watch and Preview methods", () => {
    // A cross-check of names against the option: a mutating method named like a read (or the
    // reverse) is a mistake in one of the two.
    expect(reads.map((m) => m.name).sort()).toEqual(
      methods
        .filter((m) => /^(List|Get|Watch|Preview)/.test(m.name))
        .map((m) => m.name)
        .sort(),
    );
    expect(writes.length).toBeGreaterThan(0);
  });

  it("lets the admin role call anything and the read-only role reads only; undeclared is admin-only", () => {
    expect(mayCall("admin", Access.WRITE)).toBe(true);
    expect(mayCall("admin", undefined)).toBe(true);
    expect(mayCall("read-only", Access.READ)).toBe(true);
    expect(mayCall("read-only", Access.WRITE)).toBe(false);
    expect(mayCall("read-only", Access.UNSPECIFIED)).toBe(false);
    expect(mayCall("read-only", undefined)).toBe(false);
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
  const clientWith = (key: string) =>
    createClient(
      AdminService,
      createRouterTransport(({ service }) => service(AdminService, impl), {
        router: { interceptors: [adminAuthInterceptor({ admin: testAdminKey, readOnly: readOnlyKey })] },
        transport: {
          interceptors: [
            (next) => (req) => {
              req.header.set("x-modelforge-admin-token", key);
              return next(req);
            },
          ],
        },
      }),
    );
  it.each(methods.map((m) => [m.name, m] as const))("%s", async (_name, m) => {
    expect(await callEmpty(clientWith(testAdminKey), m)).toBe("ok");
    expect(await callEmpty(clientWith(readOnlyKey), m)).toBe(table.get(m.name) === Access.READ ? "ok" : Code.PermissionDenied);
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

  it.each(methods.map((m) => [m.name, m] as const))("admin key: %s is allowed", async (_name, m) => {
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
      expect(refused.out).toMatch(/CreateEnrollmentToken changes state and needs the admin key/);
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
    expect((err as ConnectError).rawMessage).toMatch(/CreateEnrollmentToken changes state/);
    expect(ts.logs()).toMatch(/rpc refused at the edge/);
    expect(ts.logs()).not.toContain(readOnlyKey);
    expect(ts.logs()).not.toContain(testAdminKey);
  });
});
