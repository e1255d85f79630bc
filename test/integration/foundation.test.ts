// The foundation through the real protocol: one TLS port speaking Connect (JSON, as curl does),
// gRPC (a client built from proto/ at run time) and the health service; the admin API failing
// closed; correlation ids; restarts that keep data and certificates.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fileURLToPath } from "node:url";
import { statSync } from "node:fs";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { createClient, ConnectError, Code } from "@connectrpc/connect";
import { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { adminTransport, startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { postJson } from "../support/http.js";

const protoRoot = fileURLToPath(new URL("../../proto", import.meta.url));

describe("one TLS port, three protocols", () => {
  let ts: TestServer;
  beforeAll(async () => {
    ts = await startTestServer();
  });
  afterAll(() => ts?.stop());

  it("answers GetServerInfo as Connect JSON over HTTPS, with a minted correlation id", async () => {
    const res = await postJson(`${ts.url}/modelforge.agent.v1.AgentService/GetServerInfo`, ts.caPem, {});
    expect(res.status).toBe(200);
    const body = res.body as { serverVersion: string; protocolVersions: number[]; caCertificatePem: string; caFingerprint: string };
    expect(body.protocolVersions).toEqual([1]);
    expect(body.caCertificatePem).toBe(ts.caPem);
    expect(body.caFingerprint).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(res.headers["x-request-id"]).toMatch(/^[0-9a-f-]{36}$/);
  });

  it("echoes the caller's x-request-id and puts it on the request's log lines", async () => {
    const res = await postJson(
      `${ts.url}/modelforge.admin.v1.AdminService/ListNodes`,
      ts.caPem,
      {},
      { "x-request-id": "corr-foundation-1" },
    );
    expect(res.status).toBe(401);
    expect(res.headers["x-request-id"]).toBe("corr-foundation-1");
    const lines = ts
      .logs()
      .split("\n")
      .filter((l) => l.includes("corr-foundation-1"));
    expect(lines.length).toBeGreaterThan(0);
    expect(JSON.parse(lines[0]!)).toMatchObject({
      correlationId: "corr-foundation-1",
      path: "/modelforge.admin.v1.AdminService/ListNodes",
      code: "unauthenticated",
    });
  });

  it("serves gRPC to a client generated from proto/ at run time, and a SERVING health check", async () => {
    const defs = protoLoader.loadSync(["modelforge/agent/v1/agent.proto", "grpc/health/v1/health.proto"], {
      includeDirs: [protoRoot],
      longs: String,
      enums: String,
      defaults: true,
    });
    const loaded = grpc.loadPackageDefinition(defs) as any;
    const creds = grpc.credentials.createSsl(Buffer.from(ts.caPem));
    const target = ts.url.replace("https://", "");
    const agent = new loaded.modelforge.agent.v1.AgentService(target, creds);
    const health = new loaded.grpc.health.v1.Health(target, creds);
    try {
      const info = await new Promise<any>((resolve, reject) =>
        agent.GetServerInfo({}, (e: unknown, r: unknown) => (e ? reject(e) : resolve(r))),
      );
      expect(info.caCertificatePem ?? info.ca_certificate_pem).toBe(ts.caPem);
      const status = await new Promise<any>((resolve, reject) =>
        health.Check({ service: "" }, (e: unknown, r: unknown) => (e ? reject(e) : resolve(r))),
      );
      expect(status.status).toBe("SERVING");
      const named = await new Promise<any>((resolve, reject) =>
        health.Check({ service: "modelforge.admin.v1.AdminService" }, (e: unknown, r: unknown) => (e ? reject(e) : resolve(r))),
      );
      expect(named.status).toBe("SERVING");
    } finally {
      agent.close();
      health.close();
    }
  });

  it("refuses the admin API with a wrong key and serves it with the right one", async () => {
    const wrong = createClient(AdminService, adminTransport(ts.url, ts.caPem, "not-the-key-0123456789"));
    await expect(wrong.listNodes({})).rejects.toMatchObject({ code: Code.Unauthenticated, rawMessage: "invalid admin token" });
    const missing = createClient(AdminService, adminTransport(ts.url, ts.caPem, undefined));
    await expect(missing.listNodes({})).rejects.toMatchObject({ code: Code.Unauthenticated });
    const right = await ts.admin.listNodes({});
    expect(right.nodes).toEqual([]);
  });
});

describe("admin API with no key configured", () => {
  let ts: TestServer;
  beforeAll(async () => {
    ts = await startTestServer({ MODELFORGE_OPERATOR_API_KEY: "" });
  });
  afterAll(() => ts?.stop());

  it("fails every admin method closed, even with a header", async () => {
    const client = createClient(AdminService, adminTransport(ts.url, ts.caPem, testAdminKey)) as unknown as Record<
      string,
      (req: object) => unknown
    >;
    for (const method of AdminService.methods) {
      if (method.methodKind !== "unary") continue;
      const err = await Promise.resolve()
        .then(() => client[method.localName]!({}))
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(err, method.name).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code, method.name).toBe(Code.Unauthenticated);
      expect((err as ConnectError).rawMessage).toMatch(/MODELFORGE_OPERATOR_API_KEY/);
    }
    const watch = (client as any).watchNodes({}) as AsyncIterable<unknown>;
    await expect(
      (async () => {
        for await (const _ of watch) break;
      })(),
    ).rejects.toMatchObject({ code: Code.Unauthenticated });
  });
});

describe("restart", () => {
  it("keeps data and certificates, with key files 0600", async () => {
    const first = await startTestServer();
    const fingerprint = first.server.ca.fingerprint;
    const created = await first.admin.createEnrollmentToken({ nodeName: "kept" });
    const certsDir = first.config.certsDir;
    await first.server.stop();
    for (const key of ["ca.key", "server.key"]) {
      expect(statSync(join(certsDir, key)).mode & 0o777).toBe(0o600);
    }
    const { startServer } = await import("../../server/app.js");
    const { createLogger } = await import("../../server/observability/logger.js");
    const lines: string[] = [];
    const again = await startServer(first.config, createLogger("info", { write: (l: string) => void lines.push(l) } as never));
    try {
      expect(again.ca.fingerprint).toBe(fingerprint);
      const admin = createClient(AdminService, adminTransport(again.url, again.ca.certPem, testAdminKey));
      const list = await admin.listEnrollmentTokens({});
      expect(list.enrollmentTokens.map((t) => t.id)).toContain(created.enrollmentToken!.id);
      const ready = lines.map((l) => JSON.parse(l)).find((l) => l.msg === "database ready");
      expect(ready.migrationsApplied).toEqual([]);
    } finally {
      await again.stop();
      await first.stop();
    }
  });
});
