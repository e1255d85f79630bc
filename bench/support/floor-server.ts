// Bench-only reference servers for the Session stream, to tell the cost of the transport from the
// cost of the control plane: the same TLS port setup (our CA and server certificate, optional
// client certificates, server/tuning.ts) and the same messages (Welcome, then a Reply with a
// HeartbeatResponse carrying the server time per heartbeat, recorded in a HeartbeatBook, as the
// control plane's Session replies), with no database, no interceptors, no authorization.
//   BENCH_FLOOR=connect: a bidirectional Connect handler (connectNodeAdapter): the cost of
//                        Connect's generic streaming path alone;
//   BENCH_FLOOR=raw:     node:http2's core stream API with gRPC framing by hand.
// Answers the same IPC calls as server-child.ts where they make sense.
import http2 from "node:http2";
import { monitorEventLoopDelay, performance } from "node:perf_hooks";
import type { AddressInfo } from "node:net";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { durationFromMs, timestampNow } from "@bufbuild/protobuf/wkt";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import {
  AgentConfigSchema,
  AgentService,
  HeartbeatResponseSchema,
  ReplySchema,
  SessionRequestSchema,
  SessionResponseSchema,
  WelcomeSchema,
  type SessionRequest,
  type SessionResponse,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { loadConfig } from "../../server/config.js";
import { loadOrCreateCa } from "../../server/identity/pki/ca.js";
import { HeartbeatBook } from "../../server/liveness/heartbeats.js";
import { http2ServerTuning } from "../../server/tuning.js";
import { emit, serve } from "./ipc.js";
import { procStatus } from "./stats.js";
import { startAllocationProfile, startProfile, stopAllocationProfile, stopProfile, summarizeProfile } from "./profile.js";
import { FrameReader, frame } from "../../common/grpc-frames.js";

const mode = process.env.BENCH_FLOOR;
if (mode !== "raw" && mode !== "connect") throw new Error(`BENCH_FLOOR must be raw or connect, not ${mode}`);
const config = loadConfig(process.env);
const ca = await loadOrCreateCa(config.certsDir);
const tls = await ca.ensureServerCertificate(config.certsDir, config.serverNames);
const book = new HeartbeatBook(0);
let open = 0;

const agentConfig = () =>
  create(AgentConfigSchema, {
    heartbeatInterval: durationFromMs(config.heartbeatIntervalMs),
    telemetryInterval: durationFromMs(config.telemetryIntervalMs),
    inventoryInterval: durationFromMs(config.inventoryIntervalMs),
    staleAfter: durationFromMs(config.staleAfterMs),
    offlineAfter: durationFromMs(config.offlineAfterMs),
    maxFutureSkew: durationFromMs(config.maxFutureSkewMs),
    renewRemainingFraction: config.renewRemainingFraction,
    maxProgressMessageBytes: 256,
  });
const welcome = () =>
  create(SessionResponseSchema, {
    message: { case: "welcome", value: create(WelcomeSchema, { nodeId: "floor", serverVersion: "floor", config: agentConfig() }) },
  });
const reply = (nodeId: string, req: SessionRequest): SessionResponse => {
  book.record(nodeId, Date.now());
  return create(SessionResponseSchema, {
    message: {
      case: "reply",
      value: create(ReplySchema, {
        messageId: req.messageId,
        result: { case: "heartbeat", value: create(HeartbeatResponseSchema, { serverTime: timestampNow() }) },
      }),
    },
  });
};
const nodeOf = (socket: unknown) => {
  const cert = (socket as { getPeerCertificate?: () => { serialNumber?: string } }).getPeerCertificate?.();
  return cert?.serialNumber ?? "anonymous";
};

const options = {
  ...http2ServerTuning,
  key: tls.keyPem,
  cert: tls.certPem,
  ca: [ca.certPem],
  requestCert: true,
  rejectUnauthorized: false,
};
let server: http2.Http2SecureServer;
if (mode === "connect") {
  const handler = connectNodeAdapter({
    routes: (router) =>
      router.rpc(AgentService.method.session, async function* (requests, ctx) {
        const nodeId = ctx.requestHeader.get("x-node") ?? `n${open}`;
        open++;
        try {
          yield welcome();
          for await (const req of requests) yield reply(nodeId, req);
        } finally {
          open--;
        }
      }),
  });
  server = http2.createSecureServer(options, handler);
} else {
  server = http2.createSecureServer(options);
  const path = `/${AgentService.typeName}/Session`;
  server.on("stream", (stream, headers) => {
    if (headers[":path"] !== path) {
      stream.respond({ ":status": 200, "content-type": "application/grpc", "grpc-status": "12" }, { endStream: true });
      return;
    }
    const nodeId = nodeOf(stream.session?.socket);
    open++;
    stream.respond({ ":status": 200, "content-type": "application/grpc+proto" }, { waitForTrailers: true });
    stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
    const send = (m: SessionResponse) => stream.write(frame(toBinary(SessionResponseSchema, m)));
    let hello = false;
    const reader = new FrameReader(path, 64 * 1024 * 1024);
    stream.on("data", (chunk: Buffer) => {
      for (const bytes of reader.push(chunk)) {
        const req = fromBinary(SessionRequestSchema, bytes);
        if (!hello) {
          hello = true;
          send(welcome());
        } else send(reply(nodeId, req));
      }
    });
    stream.on("end", () => stream.end());
    stream.on("close", () => open--);
    stream.on("error", () => undefined);
  });
}
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;

const loopDelay = monitorEventLoopDelay({ resolution: 5 });
loopDelay.enable();
let elu = performance.eventLoopUtilization();
const gc = (globalThis as { gc?: () => void }).gc;

serve({
  info: () => ({
    url,
    caPem: ca.certPem,
    fingerprint: ca.fingerprint,
    pid: process.pid,
    tuning: http2ServerTuning,
    database: `none (BENCH_FLOOR=${mode})`,
  }),
  knownNodes: () => 0,
  async stats({ collect = false, reset = false }: { collect?: boolean; reset?: boolean }) {
    if (collect && gc) {
      gc();
      await new Promise((r) => setTimeout(r, 200));
      gc();
      await new Promise((r) => setTimeout(r, 200));
    }
    const now = performance.eventLoopUtilization();
    const window = performance.eventLoopUtilization(now, elu);
    const delay = { p50: loopDelay.percentile(50) / 1e6, p99: loopDelay.percentile(99) / 1e6, max: loopDelay.max / 1e6 };
    if (reset) {
      elu = now;
      loopDelay.reset();
    }
    return {
      at: Date.now(),
      cpu: process.cpuUsage(),
      mem: process.memoryUsage(),
      status: procStatus(),
      elu: window.utilization,
      loopDelayMs: delay,
      connected: open,
    };
  },
  liveness: () => ({ at: Date.now(), total: open, fresh: open, online: open, oldest: null, newest: null }),
  profileStart: ({ intervalUs }: { intervalUs?: number }) => startProfile(intervalUs),
  profileStop: async ({ inclusive }: { inclusive?: string[] }) => summarizeProfile(await stopProfile(), inclusive),
  allocStart: ({ intervalBytes }: { intervalBytes?: number }) => startAllocationProfile(intervalBytes),
  allocStop: ({ inclusive }: { inclusive?: string[] }) => stopAllocationProfile(inclusive),
  async stop() {
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      setTimeout(resolve, 2000).unref();
    });
    setTimeout(() => process.exit(0), 50);
    return true;
  },
});
emit("ready", { url });
