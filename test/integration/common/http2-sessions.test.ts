// A GOAWAY on an idle connection, met by a request that reconnects at once, must not crash the
// client process (connect-es#1768): a real TLS server on loopback, a real gRPC client.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as http2 from "node:http2";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
import { createClient } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { Health, HealthCheckResponse_ServingStatus } from "../../../gen/proto/grpc/health/v1/health_pb.js";
import { loadOrCreateCa } from "../../../server/identity/pki/ca.js";
import { SteadySessionManager, grpcTransport } from "../../../common/http2-sessions.js";

let dir: string;
let server: http2.Http2SecureServer;
let url: string;
let caPem: string;
const serverSessions = new Set<http2.ServerHttp2Session>();

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "mf-goaway-"));
  const ca = await loadOrCreateCa(dir);
  const tls = await ca.ensureServerCertificate(dir, ["127.0.0.1"]);
  caPem = ca.certPem;
  const handler = connectNodeAdapter({
    routes: (router) => router.service(Health, { check: () => ({ status: HealthCheckResponse_ServingStatus.SERVING }) }),
  });
  server = http2.createSecureServer({ key: tls.keyPem, cert: tls.certPem }, handler);
  server.on("session", (s) => {
    serverSessions.add(s);
    s.on("close", () => serverSessions.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const s of serverSessions) s.destroy();
  await new Promise((resolve) => server?.close(resolve));
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Remembers the session each stream went out on, to watch the client side of a connection. */
class Watched extends SteadySessionManager {
  readonly sessions: http2.Http2Session[] = [];
  override async request(...args: Parameters<SteadySessionManager["request"]>) {
    const stream = await super.request(...args);
    if (stream.session !== undefined && !this.sessions.includes(stream.session)) this.sessions.push(stream.session);
    return stream;
  }
}

describe("SteadySessionManager", () => {
  it("survives a GOAWAY on an idle connection while a new request reconnects", async () => {
    const uncaught: unknown[] = [];
    let sawUncaught: () => void = () => undefined;
    const uncaughtSeen = new Promise<void>((resolve) => (sawUncaught = resolve));
    const record = (err: unknown) => {
      uncaught.push(err);
      sawUncaught();
    };
    process.on("uncaughtException", record);
    try {
      const manager = new Watched(url, {}, { ca: caPem });
      const health = createClient(Health, grpcTransport({ baseUrl: url, sessionManager: manager }));
      expect((await health.check({})).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
      const first = manager.sessions[0]!;
      const closed = new Promise((resolve) => first.once("close", resolve));

      // The manager destroys the idle session on GOAWAY; the request made right then (after its
      // listener, before the session's late error) moves the manager to a new connection.
      const again = new Promise<Awaited<ReturnType<typeof health.check>>>((resolve, reject) =>
        first.once("goaway", () => health.check({}).then(resolve, reject)),
      );
      for (const s of serverSessions) s.goaway(http2.constants.NGHTTP2_NO_ERROR);

      expect((await again).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
      // Unguarded, the late error is thrown where 'close' would have been emitted.
      await Promise.race([closed, uncaughtSeen]);
      await new Promise((resolve) => setImmediate(resolve));
      expect(uncaught).toEqual([]);
      expect(manager.sessions).toHaveLength(2);
      expect(first.destroyed).toBe(true);
      manager.abort();
    } finally {
      process.off("uncaughtException", record);
    }
  });
});
