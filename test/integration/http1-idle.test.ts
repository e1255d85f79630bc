// An idle HTTP/1.1 connection (what the OpenAI SDKs and curl open) is closed by the server after
// MODELFORGE_HTTP1_IDLE_TIMEOUT; before it, the connection serves the next request. Raw TLS with
// ALPN http/1.1, so the test sees exactly what the server does with the socket.
import { once } from "node:events";
import tls from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.js";
import { waitFor } from "../support/wait.js";

let ts: TestServer;
beforeAll(async () => {
  ts = await startTestServer({ MODELFORGE_HTTP1_IDLE_TIMEOUT: "1s" });
}, 60_000);
afterAll(async () => {
  await ts?.stop();
});

/** Reads from `socket` until a whole response (head and its Content-Length of body) has come. */
async function response(socket: tls.TLSSocket): Promise<{ status: number; head: string }> {
  let text = "";
  for (;;) {
    const end = text.indexOf("\r\n\r\n");
    if (end >= 0) {
      const head = text.slice(0, end);
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
      if (text.length >= end + 4 + length) return { status: Number(head.split(" ")[1]), head };
    }
    const [chunk] = (await once(socket, "data")) as [Buffer];
    text += chunk.toString("utf8");
  }
}

describe("idle HTTP/1.1 connections", () => {
  it("serve requests one after another, then are closed once idle for the timeout", async () => {
    const { hostname, port } = new URL(ts.url);
    const socket = tls.connect({ host: hostname, port: Number(port), ca: ts.caPem, ALPNProtocols: ["http/1.1"], servername: "localhost" });
    await once(socket, "secureConnect");
    expect(socket.alpnProtocol).toBe("http/1.1");
    const ask = () => socket.write(`GET /v1/models HTTP/1.1\r\nhost: ${hostname}\r\nconnection: keep-alive\r\n\r\n`);
    ask();
    const first = await response(socket);
    // No key: refused, on a connection that stays open.
    expect(first.status).toBe(401);
    expect(first.head).toMatch(/\r\nkeep-alive: timeout=1\b/i);
    ask();
    expect((await response(socket)).status).toBe(401);
    const idleFrom = Date.now();
    await waitFor(() => socket.destroyed, { timeout: 20_000, what: "the server to close the idle connection" });
    expect(Date.now() - idleFrom).toBeGreaterThanOrEqual(900);
  });
});
