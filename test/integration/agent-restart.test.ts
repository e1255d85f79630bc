// Restart storms leave no agent behind: a fleet of real agents (runAgent, the loop `agent run`
// uses, over its own Connect transport) against a real control plane that is stopped and started
// again on the same port and database. One agent reaches the server through a loopback TCP relay
// that turns half-open when the restart begins: its established connection goes silent without
// closing, and its next connections are accepted and never answered (no TLS handshake). Only the
// agent's own deadlines can get it out; it must come back all the same.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import net from "node:net";
import { setMaxListeners } from "node:events";
import { readFileSync, writeFileSync } from "node:fs";
import { pino } from "pino";
import { runAgent } from "../../agent/session/run.js";
import { startServer, type RunningServer } from "../../server/app.js";
import { createLogger } from "../../server/observability/logger.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, type TestNode } from "../support/node.js";
import { waitFor } from "../support/wait.js";

const FLEET = 24;

/** A TCP relay on loopback that can go half-open: nothing forwarded, nothing closed. */
async function halfOpenRelay(target: () => number) {
  const pairs = new Set<{ client: net.Socket; upstream: net.Socket | undefined }>();
  let silent = false;
  let swallowed = 0;
  const server = net.createServer((client) => {
    client.on("error", () => undefined);
    const pair: { client: net.Socket; upstream: net.Socket | undefined } = { client, upstream: undefined };
    pairs.add(pair);
    client.on("close", () => pairs.delete(pair));
    if (silent) {
      swallowed++;
      client.pause(); // accepted, never answered: the TLS handshake waits forever
      return;
    }
    const upstream = net.connect(target(), "127.0.0.1");
    pair.upstream = upstream;
    upstream.on("error", () => client.destroy());
    client.on("error", () => upstream.destroy());
    client.pipe(upstream);
    upstream.pipe(client);
    upstream.on("close", () => {
      if (!silent) client.destroy();
    });
    client.on("close", () => upstream.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `https://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    /** Existing connections stop carrying bytes either way (the far side may close; this side never hears). */
    goSilent() {
      silent = true;
      for (const p of pairs) {
        p.client.unpipe();
        p.upstream?.unpipe();
        p.client.pause();
        p.upstream?.pause();
      }
    },
    resume() {
      silent = false;
    },
    get swallowed() {
      return swallowed;
    },
    close: () => {
      for (const p of pairs) {
        p.client.destroy();
        p.upstream?.destroy();
      }
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

let ts: TestServer;
let relay: Awaited<ReturnType<typeof halfOpenRelay>>;
let current: RunningServer;
const nodes: TestNode[] = [];
let stuck: TestNode;
const stop = new AbortController();
const running: Promise<void>[] = [];

beforeAll(async () => {
  ts = await startTestServer({ MODELFORGE_HEARTBEAT_INTERVAL: "300ms" });
  current = ts.server;
  relay = await halfOpenRelay(() => current.port);
  for (let i = 0; i < FLEET; i++) nodes.push(await enrollTestNode(ts, `fleet-${i}`));
  stuck = await enrollTestNode(ts, "half-open");
  const state = JSON.parse(readFileSync(stuck.statePath, "utf8")) as { serverUrl: string };
  writeFileSync(stuck.statePath, JSON.stringify({ ...state, serverUrl: relay.url }), { mode: 0o600 });
}, 300_000);

afterAll(async () => {
  stop.abort();
  await Promise.allSettled(running);
  await relay?.close();
  if (current !== ts?.server) await current?.stop();
  await ts?.stop();
});

const connectedCount = (s: RunningServer, of: TestNode[]) => of.filter((n) => s.sessionsConnected(n.nodeId)).length;

describe("a control-plane restart", () => {
  it("brings every agent back, including one whose connection went half-open", async () => {
    const quiet = pino({ level: "silent" });
    setMaxListeners(0, stop.signal);

    for (const n of [...nodes, stuck]) {
      running.push(
        runAgent({
          statePath: n.statePath,
          log: quiet,
          signal: stop.signal,
          reporters: null,
          backoffBaseMs: 100,
          backoffMaxMs: 1_000,
          replyTimeoutMs: 1_500,
        }),
      );
    }
    const all = [...nodes, stuck];
    await waitFor(() => connectedCount(current, all) === all.length, {
      what: () => `${connectedCount(current, all)} of ${all.length} connected`,
    });

    // The restart: the relayed agent's connection goes silent first, then the server stops.
    relay.goSilent();
    const { config } = ts;
    // A graceful stop ends even with a peer that no longer reads (its socket never flushes).
    await current.stop();
    current = await startServer({ ...config, port: ts.server.port }, createLogger("warn"));

    await waitFor(() => connectedCount(current, nodes) === nodes.length, {
      what: () => `${connectedCount(current, nodes)} of ${nodes.length} direct agents back`,
    });
    // The half-open agent gave up on its silent connection (heartbeat deadline) and on new ones
    // that never finished a handshake (Welcome deadline, armed while connecting): it keeps trying.
    await waitFor(() => relay.swallowed >= 2, { what: () => `${relay.swallowed} attempts swallowed by the half-open relay` });
    expect(current.sessionsConnected(stuck.nodeId)).toBe(false);
    relay.resume();
    await waitFor(() => current.sessionsConnected(stuck.nodeId), { what: "the half-open agent back" });
    expect(connectedCount(current, all)).toBe(all.length);
  }, 120_000);
});
