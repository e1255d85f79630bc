// Bench-only load generator process: agents, each with its own state file, certificate, HTTP/2 +
// TLS connection and Session stream, each run by the agent's own loop (agent/session/run.ts runAgent:
// Hello, Welcome, heartbeats at the server's interval with their reply deadline, reconnect with
// the agent's backoff and jitter, forever). No inventory or telemetry: heartbeats only. Driven
// over IPC by bench/heartbeats.ts.
//
// Two transports under the same loop, same bytes on the wire (gRPC over HTTP/2):
// - "connect": what `agent run` uses (agent/session/transport.ts nodeConnection);
// - "raw" (default): node:http2 with gRPC's 5-byte framing done here, about a third of the CPU per
//   message, so the load generator leaves more of the two cores to the server.
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import http2 from "node:http2";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { pino } from "pino";
import { Code, ConnectError } from "@connectrpc/connect";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  AgentService,
  SessionRequestSchema,
  SessionResponseSchema,
  type SessionResponse,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { AsyncQueue } from "../../common/queue.js";
import { runAgent } from "../../agent/session/run.js";
import { agentVersion, protocolVersion } from "../../agent/version.js";
import { nodeConnection, resumingTls, type NodeConnection } from "../../agent/session/transport.js";
import { writeState, type AgentState } from "../../agent/state.js";
import { emit, serve } from "./ipc.js";
import tls from "node:tls";
import { FrameReader, frame } from "../../common/grpc-frames.js";
import { startProfile, stopProfile, summarizeProfile } from "./profile.js";
import { recordSeconds, recordStalls } from "./timeline.js";
import { coresUsed } from "./stats.js";

interface Setup {
  /** The replicas' URLs; this worker's agents are dealt among them round-robin. */
  urls: string[];
  caPem: string;
  keyPem: string;
  agents: { nodeId: string; certPem: string }[];
  /** New connections per second from this worker. */
  connectPerSec: number;
  /** TCP_NODELAY on the agents' sockets (the real agent leaves Nagle on). */
  noDelay: boolean;
  client: "connect" | "raw";
  /** The agent's reply deadline (MODELFORGE_AGENT_REPLY_TIMEOUT; default 30 s as the agent). */
  replyTimeoutMs?: number;
}

let setup: Setup;
let measuring = false;
let latencies: number[] = [];
// When each measured heartbeat was sent (epoch ms, comparable across processes): where in the
// window the slow answers fall.
let sentAts: number[] = [];
const counts = { sent: 0, acked: 0, refused: 0, connected: 0, failed: 0, ended: 0, retries: 0 };
// Where the agents that are not connected stand: sleeping in backoff (the rest), dialing (no TCP
// yet), TCP up without TLS, TLS up without an answer (Welcome or refusal; Hello is queued on the
// stream before TLS is up and sent with it). A slow start after a restart shows in one of them.
const phases = { dialing: 0, tcp: 0, tls: 0 };
/** TLS handshakes that resumed the session the agent last had, and full ones (a signature each side). */
const handshakes = { resumed: 0, full: 0 };
let windowCounts = { sent: 0, acked: 0, refused: 0 };
const failures = new Map<string, number>();
const loopDelay = monitorEventLoopDelay({ resolution: 5 });
const seconds = recordSeconds();
const stalls = recordStalls();
let cpuAtMeasure = process.cpuUsage();
let measureStartedAt = 0;
const quiet = pino({ level: "silent" });
const dir = mkdtempSync(join(tmpdir(), "mf-bench-agents-"));
// Each agent has its own stop signal, as a real agent process does: the agent's loop adds and
// removes a listener on it per session and per backoff sleep, and Node's EventTarget scans its
// listeners on every add, so one signal shared by thousands of agents made each reconnect O(n).
const agents: { statePath: string; replica: number; connected: boolean; stop: AbortController; running?: Promise<void> }[] = [];
/** Wall-clock times (ms) of each session established, per replica the agent dials: when each came back. */
const establishedAt: number[][] = [];
let started = 0;

function failureKey(err: ConnectError): string {
  // Correlation ids differ per call; the rest of the message says what failed.
  return `${Code[err.code]}: ${err.rawMessage.replace(/\(request [0-9a-f-]+\)/, "(request …)").slice(0, 100)}`;
}

function startAgent(a: (typeof agents)[number]): void {
  a.running = runAgent({
    statePath: a.statePath,
    log: quiet,
    signal: a.stop.signal,
    reporters: null,
    ...(setup.replyTimeoutMs !== undefined ? { replyTimeoutMs: setup.replyTimeoutMs } : {}),
    connect: setup.client === "raw" ? rawConnection : (s) => nodeConnection(s),
    observer: {
      established() {
        a.connected = true;
        counts.connected++;
        establishedAt[a.replica] ??= [];
        establishedAt[a.replica]!.push(Date.now());
      },
      ended(err, opened) {
        if (a.connected) counts.connected--;
        a.connected = false;
        if (a.stop.signal.aborted) return;
        if (err === undefined) {
          if (opened) counts.ended++;
          return;
        }
        counts.retries++;
        failures.set(failureKey(err), (failures.get(failureKey(err)) ?? 0) + 1);
      },
      heartbeat(latencyMs, refused) {
        counts.sent++;
        if (measuring) windowCounts.sent++;
        if (refused) {
          counts.refused++;
          if (measuring) windowCounts.refused++;
          return;
        }
        counts.acked++;
        const sentAt = performance.now() - latencyMs;
        if (measuring && sentAt >= measureStartedAt) {
          windowCounts.acked++;
          latencies.push(latencyMs);
          sentAts.push(performance.timeOrigin + sentAt);
        }
      },
    },
  }).catch((err: unknown) => {
    // The loop only ends on stop; anything else is an agent that gave up, which must be seen.
    counts.failed++;
    failures.set(`gave up: ${(err as Error).message}`.slice(0, 100), 1);
  });
}

const sessionPath = `/${AgentService.typeName}/Session`;

// One TLS context per simulated agent, made once: building one parses the key and certificates
// (milliseconds of the load generator's CPU, taken from the server's two cores, on every
// reconnect of a storm). A real agent is one process on its own machine.
const contexts = new Map<string, tls.SecureContext>();
function contextOf(certPem: string): tls.SecureContext {
  let context = contexts.get(certPem);
  if (context === undefined) {
    context = tls.createSecureContext({ ca: setup.caPem, cert: certPem, key: setup.keyPem });
    contexts.set(certPem, context);
  }
  return context;
}

/** node:http2 with gRPC framing by hand, [0][uint32 length][protobuf], under the agent's loop. */
function rawConnection(state: AgentState): NodeConnection {
  const dial = resumingTls({ secureContext: contextOf(state.certPem), ...(setup.noDelay ? { noDelay: true } : {}) }, state.certPem);
  let phase: keyof typeof phases | undefined;
  // A stream that closes without a status on a connection whose TLS never came up was cut at
  // the handshake (the server's handshake timeout when it is overloaded), not by the server's session.
  let tlsUp = false;
  const enter = (next: keyof typeof phases | undefined) => {
    if (phase !== undefined) phases[phase]--;
    if (next !== undefined) phases[next]++;
    phase = next;
  };
  const conn = http2.connect(state.serverUrl, {
    createConnection: (authority: URL) => {
      const socket = dial(authority);
      enter("dialing");
      socket.once("connect", () => enter("tcp"));
      socket.once("secureConnect", () => {
        tlsUp = true;
        enter("tls");
        handshakes[socket.isSessionReused() ? "resumed" : "full"]++;
      });
      socket.once("close", () => enter(undefined));
      return socket;
    },
  });
  const out = new AsyncQueue<SessionResponse>();
  conn.on("error", (err) => out.fail(new ConnectError(err.message, Code.Unavailable)));
  // A connection that closes under an open stream without a status is a failure, never a clean end.
  conn.on("close", () => out.fail(new ConnectError("connection closed", Code.Unavailable)));
  return {
    async *session(requests, { signal }) {
      const stream = conn.request({
        ":method": "POST",
        ":path": sessionPath,
        "content-type": "application/grpc+proto",
        te: "trailers",
        "user-agent": "modelforge-bench-raw",
      });
      let status: string | undefined;
      let message = "";
      const grpcStatus = (h: http2.IncomingHttpHeaders) => {
        if (h["grpc-status"] !== undefined) {
          status = String(h["grpc-status"]);
          message = decodeURIComponent(String(h["grpc-message"] ?? ""));
        }
      };
      let http = 0;
      stream.on("response", (h) => {
        enter(undefined);
        http = h[":status"] ?? 0;
        // Not gRPC (a server still starting answers 503 with JSON): unavailable, body unread.
        if (http !== 200) {
          status = String(Code.Unavailable);
          message = `HTTP ${http}`;
        }
        grpcStatus(h);
      });
      stream.on("trailers", grpcStatus);
      const reader = new FrameReader(sessionPath, 64 * 1024 * 1024);
      stream.on("data", (chunk: Buffer) => {
        if (http !== 200) return;
        try {
          for (const bytes of reader.push(chunk)) out.push(fromBinary(SessionResponseSchema, bytes));
        } catch (err) {
          out.fail(ConnectError.from(err));
          stream.close(http2.constants.NGHTTP2_CANCEL);
        }
      });
      stream.on("error", (err) => out.fail(new ConnectError(err.message, Code.Unavailable)));
      stream.on("close", () => {
        if (status === "0") out.end();
        else if (status === undefined)
          out.fail(new ConnectError(tlsUp ? "stream closed without a status" : "connection closed before TLS was up", Code.Unavailable));
        else out.fail(new ConnectError(message, Number(status) as Code));
      });
      const onAbort = () => {
        out.fail(signal.reason);
        if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      void (async () => {
        for await (const m of requests) if (!stream.closed) stream.write(frame(toBinary(SessionRequestSchema, m)));
        if (!stream.closed) stream.end();
      })().catch(() => undefined);
      try {
        yield* out;
      } finally {
        signal.removeEventListener("abort", onAbort);
      }
    },
    renewCredential: () => Promise.reject(new ConnectError("the bench's raw transport does not renew", Code.Unimplemented)),
    close: () => conn.destroy(),
  };
}

/**
 * One bare TLS handshake (with the agent's client certificate, as a session's), or one whole
 * session open (handshake, Hello, Welcome), then closed: what the open-rate figure is made of.
 */
function openOnce(a: { nodeId: string; certPem: string }, session: boolean, url: string, resume: boolean): Promise<void> {
  return new Promise((resolve, reject) => {
    // resume: as the agent reconnects, offering the TLS session it was last given (and keeping the next).
    const conn = resume
      ? http2.connect(url, { createConnection: resumingTls({ secureContext: contextOf(a.certPem) }, a.certPem) })
      : http2.connect(url, { secureContext: contextOf(a.certPem) });
    const fail = (err: Error) => {
      conn.destroy();
      reject(err);
    };
    conn.on("error", fail);
    if (!session) {
      conn.on("connect", () => {
        conn.destroy();
        resolve();
      });
      return;
    }
    const stream = conn.request({ ":method": "POST", ":path": sessionPath, "content-type": "application/grpc+proto", te: "trailers" });
    stream.on("error", fail);
    const reader = new FrameReader(sessionPath, 64 * 1024 * 1024);
    stream.on("data", (chunk: Buffer) => {
      for (const bytes of reader.push(chunk)) {
        if (fromBinary(SessionResponseSchema, bytes).message.case === "welcome") {
          conn.destroy();
          resolve();
        }
      }
    });
    stream.on("close", () => fail(new Error("closed before Welcome")));
    stream.write(
      frame(
        toBinary(
          SessionRequestSchema,
          create(SessionRequestSchema, {
            messageId: 1n,
            message: { case: "hello", value: { protocolVersion, agentVersion, capabilities: [], runningJobIds: [] } },
          }),
        ),
      ),
    );
  });
}

serve({
  /** `count` handshakes or session opens, `concurrency` at a time, over this worker's agents, full or resumed. */
  async opens({ count, concurrency, session, resume }: { count: number; concurrency: number; session: boolean; resume: boolean }) {
    let next = 0;
    let failed = 0;
    const started = performance.now();
    const cpuAtStart = process.cpuUsage();
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < count) {
          const i = next++;
          const a = setup.agents[i % setup.agents.length]!;
          await openOnce(a, session, setup.urls[i % setup.urls.length]!, resume).catch(() => failed++);
        }
      }),
    );
    const ms = performance.now() - started;
    return { count, failed, ms, cores: coresUsed(cpuAtStart, process.cpuUsage(), ms) };
  },

  async setup(s: Setup) {
    setup = s;
    mkdirSync(join(dir, "agents"), { recursive: true });
    for (const [i, a] of s.agents.entries()) {
      const statePath = join(dir, "agents", `${a.nodeId}.json`);
      await writeState(statePath, {
        version: 1,
        serverUrl: s.urls[i % s.urls.length]!,
        nodeId: a.nodeId,
        keyPem: s.keyPem,
        certPem: a.certPem,
        caPem: s.caPem,
        caFingerprint: "bench",
        sequences: { inventory: "0", telemetry: "0" },
      });
      agents.push({ statePath, replica: i % s.urls.length, connected: false, stop: new AbortController() });
    }
    return agents.length;
  },

  /**
   * Starts the agents [started, upTo) at `connectPerSec` with jitter: the i-th of them starts at
   * (i + U[0,1)) / rate from now.
   */
  start({ upTo }: { upTo?: number }) {
    loopDelay.enable();
    const slot = 1000 / setup.connectPerSec;
    const end = Math.min(agents.length, upTo ?? agents.length);
    for (let i = started; i < end; i++) {
      const a = agents[i]!;
      setTimeout(() => startAgent(a), (i - started + Math.random()) * slot);
    }
    const n = end - started;
    started = end;
    return n;
  },

  /** This process by second since `fromMs` (./timeline.ts). */
  seconds: ({ fromMs }: { fromMs: number }) => seconds.since(fromMs),
  stalls: ({ fromMs }: { fromMs: number }) => stalls.since(fromMs),

  counts: () => ({ ...counts, ...phases, ...handshakes, failures: Object.fromEntries(failures) }),

  /** Per replica, the times sessions were established since `fromMs` (and the older ones forgotten). */
  establishedSince({ fromMs }: { fromMs: number }) {
    for (const times of establishedAt) {
      const kept = times?.findIndex((t) => t >= fromMs) ?? 0;
      times?.splice(0, kept === -1 ? times.length : kept);
    }
    return Array.from(establishedAt, (times) => times ?? []);
  },

  // PROFILE=agents: where the agents' own loop spends the load generator's CPU.
  profileStart: ({ intervalUs }: { intervalUs?: number }) => startProfile(intervalUs),
  profileStop: async ({ inclusive }: { inclusive?: string[] }) => summarizeProfile(await stopProfile(), inclusive),

  /** Starts the steady-state window: latencies of heartbeats sent from now on. */
  measure() {
    latencies = [];
    sentAts = [];
    windowCounts = { sent: 0, acked: 0, refused: 0 };
    measureStartedAt = performance.now();
    cpuAtMeasure = process.cpuUsage();
    loopDelay.reset();
    measuring = true;
    return true;
  },

  report() {
    measuring = false;
    const wallMs = performance.now() - measureStartedAt;
    const cpu = process.cpuUsage(cpuAtMeasure);
    return {
      ...counts,
      wallMs,
      ...windowCounts,
      latencies: Float64Array.from(latencies),
      sentAts: Float64Array.from(sentAts),
      cpuCores: (cpu.user + cpu.system) / 1000 / wallMs,
      loopDelayP99Ms: loopDelay.percentile(99) / 1e6,
      loopDelayMaxMs: loopDelay.max / 1e6,
      rssBytes: process.memoryUsage().rss,
      failures: Object.fromEntries(failures),
    };
  },

  /** Stops every agent (its loop ends its stream), then gives up waiting. */
  async close({ waitMs = 10_000 }: { waitMs?: number }) {
    for (const a of agents) a.stop.abort();
    await Promise.race([Promise.allSettled(agents.map((a) => a.running)), new Promise((r) => setTimeout(r, waitMs))]);
    rmSync(dir, { recursive: true, force: true });
    setTimeout(() => process.exit(0), 100);
    return { ...counts };
  },
});
emit("ready");
