// The agent gives up on a session the server does not answer, and reconnects: against a TLS server
// (certificate from the real control plane's CA, so the agent's pin holds) that accepts Session
// streams and then stays silent, or answers Welcome and then ignores heartbeats.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { pino } from "pino";
import { create, toBinary } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { SessionResponseSchema } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { runAgent } from "../../agent/session/run.js";
import { frame } from "../../common/grpc-frames.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, eventually } from "../support/node.js";
import { waitFor } from "../support/wait.js";

let ts: TestServer;
let certsDir: string;
beforeAll(async () => {
  ts = await startTestServer();
  certsDir = mkdtempSync(join(tmpdir(), "mf-silent-"));
});
afterAll(async () => {
  await ts?.stop();
  rmSync(certsDir, { recursive: true, force: true });
});

/** A server that holds every Session stream open; `welcome` makes it answer Hello and nothing else. */
async function silentServer(welcome: boolean) {
  const tls = await ts.server.ca.ensureServerCertificate(certsDir, ["127.0.0.1"]);
  const streams: http2.ServerHttp2Stream[] = [];
  const server = http2.createSecureServer({ key: tls.keyPem, cert: tls.certPem });
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (s) => sessions.add(s));
  server.on("stream", (stream) => {
    streams.push(stream);
    stream.on("error", () => undefined);
    stream.resume();
    if (!welcome) return;
    stream.respond({ ":status": 200, "content-type": "application/grpc+proto" });
    const config = {
      heartbeatInterval: durationFromMs(50),
      telemetryInterval: durationFromMs(60_000),
      inventoryInterval: durationFromMs(60_000),
    };
    stream.write(
      frame(
        toBinary(
          SessionResponseSchema,
          create(SessionResponseSchema, { message: { case: "welcome", value: { nodeId: "silent", config } } }),
        ),
      ),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    streams,
    close: () => {
      for (const s of sessions) s.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function agentAgainst(url: string, name: string) {
  const node = await enrollTestNode(ts, name);
  const state = JSON.parse(readFileSync(node.statePath, "utf8")) as { serverUrl: string };
  writeFileSync(node.statePath, JSON.stringify({ ...state, serverUrl: url }), { mode: 0o600 });
  const lines: string[] = [];
  const log = pino(
    { level: "debug" },
    new Writable({
      write: (chunk: Buffer, _e, cb) => {
        lines.push(chunk.toString());
        cb();
      },
    }),
  );
  const stop = new AbortController();
  const running = runAgent({
    statePath: node.statePath,
    log,
    signal: stop.signal,
    backoffBaseMs: 20,
    backoffMaxMs: 50,
    replyTimeoutMs: 300,
  });
  return {
    logs: () => lines.join(""),
    stop: async () => {
      stop.abort();
      await running;
    },
  };
}

/** Waits until the server has seen `n` Session streams; on failure, says what the agent logged. */
async function sessionsSeen(silent: { streams: unknown[] }, agent: { logs(): string }, n: number) {
  await eventually(() => silent.streams.length >= n, 10_000, `${n} session attempts`).catch((err: unknown) => {
    throw new Error(`${(err as Error).message}; saw ${silent.streams.length}; agent log:\n${agent.logs()}`);
  });
}

describe("agent reply deadline", () => {
  it.each([
    {
      when: "the server never answers Hello",
      welcome: false,
      attempts: 3,
      logged: ["no Welcome from the server within 300 ms", '"code":"deadline_exceeded"'],
    },
    {
      when: "heartbeats go unanswered after Welcome",
      welcome: true,
      attempts: 2,
      logged: ["session established", "no heartbeat answer from the server within 300 ms"],
    },
  ])("reconnects when $when", async ({ welcome, attempts, logged }) => {
    const silent = await silentServer(welcome);
    const agent = await agentAgainst(silent.url, `silent-${attempts}`);
    try {
      await sessionsSeen(silent, agent, attempts);
      // On a busy machine an attempt may also miss its Welcome deadline: the agent goes on
      // reconnecting until one ends the way this case is about.
      await waitFor(() => logged.every((line) => agent.logs().includes(line)), {
        what: () => `${logged.join(" and ")} in the agent log:\n${agent.logs()}`,
      });
    } finally {
      await agent.stop();
      await silent.close();
    }
  });
});

describe("agent stop", () => {
  // The stop can land while the loop reads its state file between sessions (the loop checked the
  // signal just before): the session then opening must end at once, not run on with heartbeats.
  it("ends when stopped while it reads its state before a session", async () => {
    const node = await enrollTestNode(ts, "stopped-between-sessions");
    const stop = new AbortController();
    const running = runAgent({ statePath: node.statePath, log: pino({ level: "silent" }), signal: stop.signal });
    stop.abort(); // runAgent is now awaiting readState
    const ended = await Promise.race([running.then(() => true), new Promise<false>((r) => setTimeout(() => r(false), 10_000))]);
    expect(ended).toBe(true);
    expect(ts.server.sessionsConnected(node.nodeId)).toBe(false);
  });
});
