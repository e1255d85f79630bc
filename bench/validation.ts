// What the edge check costs per call, in CPU (one thread, no I/O), on the two messages that pass
// it most: a heartbeat on the Session's general path (one not of the wire codec's shape), and an
// Invoke with a 1 KiB payload. Each message is checked three ways: the Session's hand-written walk
// (bounds read from the annotations), protovalidate alone, and what the edge runs on an RPC (the
// walk's rules for every field, then protovalidate). The anchor, measured in the same run: decoding
// the same message with protobuf-es (fromBinary), which every call pays anyway.
//   npx tsx bench/validation.ts        (BENCH_RUNS=5, BENCH_CALLS=20000)
import { loadavg } from "node:os";
import { create, fromBinary, toBinary, type DescMessage, type Message } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { SessionRequestSchema } from "../gen/proto/modelforge/agent/v1/agent_pb.js";
import { InvokeApi, InvokeRequestSchema } from "../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { requestViolation, sessionMessageViolation } from "../server/edge/validate.js";
import { boundsViolation } from "../server/edge/protovalidate.js";

const runs = Number(process.env.BENCH_RUNS ?? 5);
const calls = Number(process.env.BENCH_CALLS ?? 20_000);

const heartbeat = create(SessionRequestSchema, {
  messageId: 42n,
  message: {
    case: "heartbeat",
    value: {
      agentVersion: "0.1.0",
      sentAt: timestampNow(),
      capabilities: ["artifact.acquire.v1", "deployment.load.v1"],
      replicaLoads: [{ deploymentId: "3f1c5e0a-9b7d-4c2e-8f6a-1d2b3c4d5e6f", revision: 3n, replica: 0, inFlight: 2, queued: 1 }],
    },
  },
});
const invoke = create(InvokeRequestSchema, {
  deploymentId: "chat",
  contentType: "application/json",
  payload: Buffer.from(JSON.stringify({ messages: [{ role: "user", content: "x".repeat(960) }], max_tokens: 64 })),
  api: InvokeApi.CHAT_COMPLETIONS,
});

/** Microseconds per call of `fn`, over `calls` calls after a warm-up. */
function perCall(fn: () => unknown): number {
  for (let i = 0; i < 2_000; i++) fn();
  const started = process.cpuUsage();
  for (let i = 0; i < calls; i++) fn();
  const used = process.cpuUsage(started);
  return (used.user + used.system) / calls;
}

function spread(values: number[]): string {
  const sorted = [...values].sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)]!;
  return `${median.toFixed(2)} µs (${sorted[0]!.toFixed(2)}-${sorted.at(-1)!.toFixed(2)})`;
}

function measure(name: string, desc: DescMessage, message: Message) {
  const bytes = toBinary(desc, message);
  const results = { decode: [] as number[], walk: [] as number[], protovalidate: [] as number[], edge: [] as number[] };
  for (let r = 0; r < runs; r++) {
    results.decode.push(perCall(() => fromBinary(desc, bytes)));
    results.walk.push(perCall(() => sessionMessageViolation(desc, message)));
    results.protovalidate.push(perCall(() => boundsViolation(desc, message)));
    results.edge.push(perCall(() => requestViolation(desc, message)));
  }
  const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)]!;
  const ratio = (v: number[]) => (median(v) / median(results.decode)).toFixed(2);
  console.log(`${name} (${bytes.length} bytes)`);
  console.log(`  anchor, fromBinary:          ${spread(results.decode)}`);
  console.log(`  the Session's walk:          ${spread(results.walk)}  = ${ratio(results.walk)} × the decode`);
  console.log(`  protovalidate alone:         ${spread(results.protovalidate)}  = ${ratio(results.protovalidate)} × the decode`);
  console.log(`  the edge on an RPC (both):   ${spread(results.edge)}  = ${ratio(results.edge)} × the decode`);
}

console.log(
  `${runs} runs of ${calls} calls each, one thread; load ${loadavg()
    .map((l) => l.toFixed(2))
    .join(" ")}`,
);
measure("heartbeat (SessionRequest)", SessionRequestSchema, heartbeat);
measure("Invoke (InvokeRequest, 1 KiB payload)", InvokeRequestSchema, invoke);
