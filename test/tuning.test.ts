// What server/tuning.ts claims about TLS sessions, held against the real server: no session is
// ever resumed, so every reconnect is a full handshake, and TLS 1.2 clients get no ticket.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import tls from "node:tls";
import { startTestServer, type TestServer } from "./support/server.js";

let ts: TestServer;
beforeAll(async () => {
  ts = await startTestServer();
});
afterAll(async () => {
  await ts.stop();
});

interface Handshake {
  /** The first session the client was given (a ticket in TLS 1.3, a session id in 1.2). */
  session: Buffer;
  ticket: Buffer | undefined;
  reused: boolean;
}

/** Connects, waits for the server to hand over a session, and disconnects. */
function handshake(version: tls.SecureVersion, session?: Buffer): Promise<Handshake> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({
      host: "127.0.0.1",
      port: ts.server.port,
      ca: ts.caPem,
      ALPNProtocols: ["h2"],
      minVersion: version,
      maxVersion: version,
      session,
    });
    socket.once("error", reject);
    const done = (given: Buffer | undefined) => {
      const result = { session: given ?? Buffer.alloc(0), ticket: socket.getTLSTicket(), reused: socket.isSessionReused() };
      socket.destroy();
      resolve(result);
    };
    socket.once("session", done);
    // A resumed session may bring no new one: nothing more to wait for.
    socket.once("secureConnect", () => socket.isSessionReused() && done(undefined));
  });
}

describe("TLS sessions", () => {
  it.each(["TLSv1.2", "TLSv1.3"] as const)("%s: a session the server handed out does not resume", async (version) => {
    const first = await handshake(version);
    expect(first.reused).toBe(false);
    const second = await handshake(version, first.session);
    expect(second.reused).toBe(false);
  });

  it("TLS 1.2: no session ticket", async () => {
    expect((await handshake("TLSv1.2")).ticket).toBeUndefined();
  });
});
