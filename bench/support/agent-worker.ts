// Bench-only load generator process: simulates agents, each with its own certificate, its own
// HTTP/2 + TLS connection and one Session stream. Each agent says Hello, waits for Welcome, then
// sends a heartbeat every `intervalMs` at a random phase and times the matching Reply by
// message_id. A session that fails is opened again after the agent's own backoff
// (agent/rules.ts: exponential, full jitter, 500 ms base), at most 8 times. Driven over IPC by
// bench/heartbeats.ts.
//
// Two clients, same bytes on the wire (gRPC over HTTP/2, protobuf-es messages):
// - "connect": what the agent runs, a Connect gRPC transport per agent (connect-node keeps one
//   Http2SessionManager, so one connection, per transport) with agent/transport.ts's pings;
// - "raw": node:http2 per agent with gRPC's 5-byte message framing done here, about a third of the
//   CPU per message, so the load generator leaves more of the two cores to the server.
import { setMaxListeners } from "node:events";
import http2 from "node:http2";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  AgentService,
  SessionRequestSchema,
  SessionResponseSchema,
  type SessionRequest,
  type SessionResponse,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { AsyncQueue } from "../../common/queue.js";
import { agentVersion, protocolVersion } from "../../agent/version.js";
import { backoffDelay } from "../../agent/rules.js";
import { emit, serve } from "./ipc.js";
import { FrameReader, frame } from "../../server/sessions/session-grpc.js";

interface Setup {
  url: string;
  caPem: string;
  keyPem: string;
  agents: { nodeId: string; certPem: string }[];
  intervalMs: number;
  /** New connections per second from this worker. */
  connectPerSec: number;
  /** TCP_NODELAY on the agents' sockets (the real agent leaves Nagle on). */
  noDelay: boolean;
  client: "connect" | "raw";
}

type Message = MessageInitShape<typeof SessionRequestSchema>;

/** One open Session, whichever client carries it. */
interface Link {
  send(message: SessionRequest): void;
  /** Half-closes: the server then ends its side. */
  end(): void;
  /** Gives up on the connection at once, failing with `err`. */
  abort(err: ConnectError): void;
}

let setup: Setup;
let measuring = false;
let latencies: number[] = [];
const counts = { sent: 0, acked: 0, refused: 0, connected: 0, failed: 0, ended: 0, retries: 0 };
/** A real agent retries forever; enough here to ride out a server restart (RESTART=1). */
const MAX_ATTEMPTS = 20;
/** The agent's default reply timeout. */
const WELCOME_TIMEOUT_MS = 30_000;
let windowCounts = { sent: 0, acked: 0, refused: 0 };
const failures = new Map<string, number>();
const loopDelay = monitorEventLoopDelay({ resolution: 5 });
let cpuAtMeasure = process.cpuUsage();
let measureStartedAt = 0;
const abort = new AbortController();
setMaxListeners(0, abort.signal); // one listener per agent's call
const agents: SimAgent[] = [];
let started = 0;

class SimAgent {
  private link: Link | undefined;
  private readonly pending = new Map<bigint, number>();
  private attempt = 0;
  private nextId = 0n;
  private timer: NodeJS.Timeout | undefined;
  state: "idle" | "connecting" | "connected" | "failed" | "ended" = "idle";
  private settled!: () => void;
  readonly done = new Promise<void>((resolve) => (this.settled = resolve));

  constructor(private readonly agent: { nodeId: string; certPem: string }) {}

  start(): void {
    this.state = "connecting";
    this.pending.clear();
    const open = setup.client === "raw" ? openRaw : openConnect;
    const link = open(
      this.agent,
      (m) => this.onMessage(m),
      (state, err) => this.finish(state, err),
    );
    this.link = link;
    // As the agent (MODELFORGE_AGENT_REPLY_TIMEOUT): no Welcome in time, give up and retry.
    this.timer = setTimeout(() => {
      if (this.state === "connecting" && this.link === link)
        link.abort(new ConnectError(`no Welcome within ${WELCOME_TIMEOUT_MS} ms`, Code.DeadlineExceeded));
    }, WELCOME_TIMEOUT_MS);
    this.link.send(
      create(SessionRequestSchema, {
        messageId: ++this.nextId,
        message: { case: "hello", value: { protocolVersion, agentVersion, capabilities: [], runningJobIds: [] } },
      }),
    );
  }

  private onMessage(res: SessionResponse): void {
    const m = res.message;
    if (m.case === "welcome") {
      clearTimeout(this.timer);
      this.state = "connected";
      this.attempt = 0;
      counts.connected++;
      // A random phase spreads the fleet evenly over the interval.
      this.timer = setTimeout(() => {
        this.beat();
        this.timer = setInterval(() => this.beat(), setup.intervalMs);
      }, Math.random() * setup.intervalMs);
    } else if (m.case === "reply") {
      const sentAt = this.pending.get(m.value.messageId);
      if (sentAt === undefined) return;
      this.pending.delete(m.value.messageId);
      if (m.value.result.case === "error") {
        counts.refused++;
        if (measuring) windowCounts.refused++;
        return;
      }
      counts.acked++;
      if (measuring && sentAt >= measureStartedAt) {
        windowCounts.acked++;
        latencies.push(performance.now() - sentAt);
      }
    }
  }

  private beat(): void {
    const messageId = ++this.nextId;
    const message: Message = { messageId, message: { case: "heartbeat", value: { agentVersion, sentAt: timestampFromMs(Date.now()) } } };
    this.pending.set(messageId, performance.now());
    this.link?.send(create(SessionRequestSchema, message));
    counts.sent++;
    if (measuring) windowCounts.sent++;
    // A reply that never comes would otherwise grow the map forever.
    if (this.pending.size > 100) this.pending.clear();
  }

  private finish(state: "ended" | "failed", err: unknown): void {
    if (this.state === "ended" || this.state === "failed") return;
    if (this.state === "connected") counts.connected--;
    clearTimeout(this.timer);
    clearInterval(this.timer);
    this.link = undefined;
    if (state === "failed" && !abort.signal.aborted) {
      const ce = ConnectError.from(err);
      // Correlation ids differ per call; the rest of the message says what failed.
      const key = `${Code[ce.code]}: ${ce.rawMessage.replace(/\(request [0-9a-f-]+\)/, "(request …)").slice(0, 100)}`;
      failures.set(key, (failures.get(key) ?? 0) + 1);
      if (++this.attempt < MAX_ATTEMPTS) {
        counts.retries++;
        this.state = "connecting";
        this.timer = setTimeout(() => this.start(), backoffDelay(this.attempt, 500, 30_000));
        return;
      }
      counts.failed++;
      this.state = "failed";
    } else {
      counts.ended++;
      this.state = "ended";
    }
    this.settled();
  }

  end(): void {
    clearTimeout(this.timer);
    clearInterval(this.timer);
    if (this.link === undefined) {
      if (this.state !== "ended" && this.state !== "failed") this.finish("ended", undefined);
      return;
    }
    this.link.end();
  }
}

/** The agent's own client: a Connect gRPC transport of its own. */
function openConnect(
  agent: { certPem: string },
  onMessage: (m: SessionResponse) => void,
  onEnd: (state: "ended" | "failed", err?: unknown) => void,
): Link {
  const transport = createGrpcTransport({
    baseUrl: setup.url,
    nodeOptions: { ca: setup.caPem, cert: agent.certPem, key: setup.keyPem, ...(setup.noDelay ? { noDelay: true } : {}) },
    // As agent/transport.ts.
    pingIntervalMs: 15_000,
    pingTimeoutMs: 10_000,
  });
  const outbound = new AsyncQueue<SessionRequest>();
  const client = createClient(AgentService, transport);
  const stop = new AbortController();
  void (async () => {
    try {
      for await (const res of client.session(outbound, { signal: AbortSignal.any([abort.signal, stop.signal]) })) onMessage(res);
      onEnd("ended");
    } catch (err) {
      onEnd("failed", err);
    }
  })();
  return {
    send: (m) => void outbound.push(m),
    end: () => outbound.end(),
    abort(err) {
      onEnd("failed", err);
      stop.abort(err);
    },
  };
}

const sessionPath = `/${AgentService.typeName}/Session`;

/** node:http2 with gRPC framing by hand: [0][uint32 length][protobuf]. */
function openRaw(
  agent: { certPem: string },
  onMessage: (m: SessionResponse) => void,
  onEnd: (state: "ended" | "failed", err?: unknown) => void,
): Link {
  let ended = false;
  const end = (state: "ended" | "failed", err?: unknown) => {
    if (ended) return;
    ended = true;
    session.close();
    onEnd(state, err);
  };
  const session = http2.connect(setup.url, {
    ca: setup.caPem,
    cert: agent.certPem,
    key: setup.keyPem,
    ...(setup.noDelay ? { noDelay: true } : {}),
  });
  session.on("error", (err) => end("failed", new ConnectError(err.message, Code.Unavailable)));
  const stream = session.request({
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
  stream.on("response", (h) => {
    if (h[":status"] !== 200) status = String(Code.Unknown);
    grpcStatus(h);
  });
  stream.on("trailers", grpcStatus);
  const reader = new FrameReader();
  stream.on("data", (chunk: Buffer) => {
    for (const bytes of reader.push(chunk)) onMessage(fromBinary(SessionResponseSchema, bytes));
  });
  stream.on("error", (err) => end("failed", new ConnectError(err.message, Code.Unavailable)));
  stream.on("close", () => {
    if (status === undefined || status === "0") end("ended");
    else end("failed", new ConnectError(message, Number(status) as Code));
  });
  return {
    send(m) {
      stream.write(frame(toBinary(SessionRequestSchema, m)));
    },
    end: () => stream.end(),
    abort(err) {
      end("failed", err);
      session.destroy();
    },
  };
}

serve({
  setup(s: Setup) {
    setup = s;
    for (const a of s.agents) agents.push(new SimAgent(a));
    return agents.length;
  },

  /**
   * Opens the connections of agents [started, upTo) at `connectPerSec` with jitter: the i-th
   * of them starts at (i + U[0,1)) / rate from now.
   */
  start({ upTo }: { upTo?: number }) {
    loopDelay.enable();
    const slot = 1000 / setup.connectPerSec;
    const end = Math.min(agents.length, upTo ?? agents.length);
    for (let i = started; i < end; i++) {
      const a = agents[i]!;
      setTimeout(() => a.start(), (i - started + Math.random()) * slot);
    }
    const n = end - started;
    started = end;
    return n;
  },

  counts: () => ({ ...counts, failures: Object.fromEntries(failures) }),

  /** Starts the steady-state window: latencies of heartbeats sent from now on. */
  measure() {
    latencies = [];
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
      cpuCores: (cpu.user + cpu.system) / 1000 / wallMs,
      loopDelayP99Ms: loopDelay.percentile(99) / 1e6,
      loopDelayMaxMs: loopDelay.max / 1e6,
      rssBytes: process.memoryUsage().rss,
      failures: Object.fromEntries(failures),
    };
  },

  /** Ends every stream cleanly (half-close; the server ends its side), then gives up waiting. */
  async close({ waitMs = 10_000 }: { waitMs?: number }) {
    for (const a of agents) a.end();
    await Promise.race([Promise.allSettled(agents.map((a) => a.done)), new Promise((r) => setTimeout(r, waitMs))]);
    abort.abort();
    setTimeout(() => process.exit(0), 100);
    return { ...counts };
  },
});
emit("ready");
