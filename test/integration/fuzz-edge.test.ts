// Descriptor-driven fuzzing of the edge (issue 9, defect 3): every method of every service, read
// from the generated descriptors, is called through a real server with undecodable bodies and with
// one hostile value at a time in each field (NULs and control characters, over-long strings, a
// malformed UUID, extreme numbers, unknown enum values, huge repeated fields and maps), with the
// admin token for admin methods and a real node certificate for node methods so the calls get
// past authentication. Bad input must be refused with a typed code: never internal or unknown,
// never a stack in the log, and the server keeps serving. Invoke payloads (issue 34) are fuzzed
// through a real agent serving the tiny GGUF in llama.cpp: JSON shapes, depth, sizes, unicode and
// every OpenAI request field with hostile values; each is answered or refused as invalid_argument,
// with no error-level line in the server's or the agent's log.
import http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  create,
  fromBinary,
  getOption,
  toBinary,
  ScalarType,
  type DescField,
  type DescMessage,
  type DescService,
  type Message,
} from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { grpcTransport } from "../../common/http2-sessions.js";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { enrollTestNode, type TestNode } from "../support/node.js";
import { AsyncQueue } from "../../common/queue.js";
import { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { Access, access } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import {
  AgentService,
  SessionRequestSchema,
  type SessionRequest,
  type SessionResponse,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { DeploymentService, InvokeRequestSchema } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { Health } from "../../gen/proto/grpc/health/v1/health_pb.js";
import { supportedProtocolVersions } from "../../server/version.js";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import type { AgentProcess } from "../support/process.js";
import { errorLines, serveTiny, servingNode } from "../support/serving.js";
import { hostilePayloads } from "../support/hostile-json.js";
import { call } from "../support/raw-call.js";

const services: DescService[] = [AgentService, AdminService, DeploymentService, Health];
const hugeCount = 5_000;
const longText = "x".repeat(70_000);

/** One hostile request: which field got which kind of value, and the encoded message. */
interface Variant {
  label: string;
  bytes: Uint8Array;
}

/** Hostile values for one field, by its kind. */
function hostileValues(field: DescField): { label: string; value: unknown }[] {
  switch (field.fieldKind) {
    case "scalar":
      return scalarValues(field.scalar);
    case "enum":
      return [
        { label: "unknown enum", value: 999 },
        { label: "negative enum", value: -5 },
      ];
    case "list":
      if (field.listKind === "scalar" && field.scalar === ScalarType.STRING) {
        return [
          { label: "huge list", value: Array<string>(hugeCount).fill("x") },
          { label: "NUL in element", value: ["a\0b"] },
          { label: "long element", value: [longText] },
        ];
      }
      if (field.listKind === "enum")
        return [
          { label: "huge list", value: Array<number>(hugeCount).fill(1) },
          { label: "unknown enum element", value: [999] },
        ];
      if (field.listKind === "message")
        return [{ label: "huge list", value: Array.from({ length: hugeCount }, () => create(field.message)) }];
      if (field.listKind === "scalar") return [{ label: "huge list", value: Array<unknown>(hugeCount).fill(zeroOf(field.scalar)) }];
      return [];
    case "map": {
      if (field.mapKind !== "scalar" || field.scalar !== ScalarType.STRING) return [];
      const many: Record<string, string> = {};
      for (let i = 0; i < hugeCount; i++) many[`k${i}`] = "v";
      return [
        { label: "NUL in map key", value: { "a\0b": "v" } },
        { label: "NUL in map value", value: { k: "a\0b" } },
        { label: "long map key", value: { [longText]: "v" } },
        { label: "long map value", value: { k: longText } },
        { label: "huge map", value: many },
      ];
    }
    default:
      return [];
  }
}

function zeroOf(scalar: ScalarType): unknown {
  switch (scalar) {
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
    case ScalarType.SINT64:
      return 0n;
    case ScalarType.BOOL:
      return false;
    case ScalarType.BYTES:
      return new Uint8Array();
    default:
      return 0;
  }
}

function scalarValues(scalar: ScalarType): { label: string; value: unknown }[] {
  switch (scalar) {
    case ScalarType.STRING:
      return [
        { label: "NUL", value: "a\0b" },
        { label: "control character", value: "a\u0007b" },
        { label: "over-long", value: longText },
        { label: "36 dashes", value: "-".repeat(36) },
      ];
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return [
        { label: "2^64-1", value: 2n ** 64n - 1n },
        { label: "2^63", value: 2n ** 63n },
      ];
    case ScalarType.INT64:
    case ScalarType.SFIXED64:
    case ScalarType.SINT64:
      return [
        { label: "-2^63", value: -(2n ** 63n) },
        { label: "2^63-1", value: 2n ** 63n - 1n },
      ];
    case ScalarType.INT32:
    case ScalarType.SFIXED32:
    case ScalarType.SINT32:
      return [
        { label: "int32 max", value: 2 ** 31 - 1 },
        { label: "int32 min", value: -(2 ** 31) },
      ];
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return [{ label: "uint32 max", value: 2 ** 32 - 1 }];
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return [
        { label: "NaN", value: Number.NaN },
        { label: "Infinity", value: Number.POSITIVE_INFINITY },
        { label: "-1e300", value: -1e300 },
      ];
    default:
      return [];
  }
}

/** Every field reachable from a message (through singular and oneof message fields), as paths. */
function fieldPaths(desc: DescMessage, depth = 0, seen: string[] = []): DescField[][] {
  const out: DescField[][] = [];
  for (const field of desc.fields) {
    out.push([field]);
    // A wrapper (google.protobuf.UInt32Value, ...) is its value in protobuf-es: nothing to walk into.
    const wrapper = field.fieldKind === "message" && /^google\.protobuf\.\w+Value$/.test(field.message.typeName);
    if (field.fieldKind === "message" && !wrapper && depth < 4 && !seen.includes(field.message.typeName)) {
      for (const rest of fieldPaths(field.message, depth + 1, [...seen, desc.typeName])) out.push([field, ...rest]);
    }
  }
  return out;
}

/** A message with only the given path set, ending in `value`. */
function messageWith(desc: DescMessage, path: DescField[], value: unknown): Message {
  const root = create(desc) as unknown as Record<string, unknown>;
  let target = root;
  path.forEach((field, i) => {
    const last = i === path.length - 1;
    const v = last ? value : create((field as DescField & { message: DescMessage }).message);
    if (field.oneof) target[field.oneof.localName] = { case: field.localName, value: v };
    else target[field.localName] = v;
    target = v as Record<string, unknown>;
  });
  return root as unknown as Message;
}

function variantsOf(desc: DescMessage): Variant[] {
  const out: Variant[] = [];
  for (const path of fieldPaths(desc)) {
    const leaf = path[path.length - 1]!;
    const name = path.map((f) => f.name).join(".");
    for (const { label, value } of hostileValues(leaf)) {
      out.push({ label: `${name}: ${label}`, bytes: toBinary(desc, messageWith(desc, path, value)) });
    }
  }
  return out;
}

/** Bodies no decoder should accept. */
const garbageBodies: { label: string; bytes: Uint8Array }[] = [
  { label: "illegal tag", bytes: Uint8Array.from([0x00, 0x01, 0x02]) },
  { label: "truncated length", bytes: Uint8Array.from([0x0a, 0x7f, 0x41]) },
  { label: "bad wire type", bytes: Uint8Array.from([0x0f, 0x01]) },
  { label: "random", bytes: Uint8Array.from({ length: 64 }, (_, i) => (i * 131 + 7) % 256) },
  { label: "unknown fields", bytes: new Uint8Array(4096).fill(0x41) },
];

interface Outcome {
  call: string;
  code: string;
}

/** gRPC status numbers that must never answer bad input. */
const grpcForbidden = new Map([
  ["2", "unknown"],
  ["13", "internal"],
]);

function envelope(bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + bytes.byteLength);
  new DataView(out.buffer).setUint32(1, bytes.byteLength);
  out.set(bytes, 5);
  return out;
}

/** One raw gRPC call; resolves with the status, or "ok-streaming" once a stream has begun. */
function grpcCall(session: http2.ClientHttp2Session, path: string, body: Uint8Array, headers: Record<string, string>): Promise<string> {
  return new Promise((resolve) => {
    const req = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers", ...headers });
    let status: string | undefined;
    const take = (h: http2.IncomingHttpHeaders) => {
      const s = h["grpc-status"];
      if (typeof s === "string") status = s;
    };
    req.on("response", take);
    req.on("trailers", take);
    req.on("data", () => {
      // A streaming method that sent a message got past validation; stop it here.
      if (status === undefined) {
        status = "ok-streaming";
        req.close(http2.constants.NGHTTP2_CANCEL);
      }
    });
    req.on("close", () => resolve(status ?? "no-status"));
    // A reset stream is an answer too, and not an acceptable one.
    req.on("error", (err: Error) => resolve(status ?? `stream error: ${err.message}`));
    req.end(envelope(body));
  });
}

/** One Connect-protocol unary call with a binary body; resolves with the error code or "ok". */
function connectCall(session: http2.ClientHttp2Session, path: string, body: Uint8Array, headers: Record<string, string>): Promise<string> {
  return new Promise((resolve) => {
    const req = session.request({ ":method": "POST", ":path": path, "content-type": "application/proto", ...headers });
    const chunks: Buffer[] = [];
    let httpStatus = 0;
    req.on("response", (h) => (httpStatus = Number(h[":status"])));
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("close", () => {
      if (httpStatus === 200) return resolve("ok");
      try {
        resolve(String((JSON.parse(Buffer.concat(chunks).toString("utf8")) as { code?: string }).code));
      } catch {
        resolve(`http ${httpStatus}`);
      }
    });
    req.on("error", (err: Error) => resolve(`stream error: ${err.message}`));
    req.end(body);
  });
}

/** Log lines of unexpected failures (each carries a stack), summarised without their bodies. */
function failureLines(ts: TestServer): string[] {
  return ts
    .logs()
    .split("\n")
    .filter((l) => /"msg":"(rpc failed|session failed|session message failed)"/.test(l))
    .map((l) => {
      const line = JSON.parse(l) as { msg: string; path?: string; err?: { message?: string }; error?: string };
      return `${line.msg} ${line.path ?? ""} ${(line.err?.message ?? line.error ?? "").slice(0, 120)}`;
    });
}

/** One gRPC-Web call; resolves with the status of its trailer frame, or "ok-streaming". */
function grpcWebCall(session: http2.ClientHttp2Session, path: string, body: Uint8Array, headers: Record<string, string>): Promise<string> {
  return new Promise((resolve) => {
    const req = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc-web+proto", ...headers });
    const chunks: Buffer[] = [];
    let headerStatus: string | undefined;
    req.on("response", (h) => {
      if (typeof h["grpc-status"] === "string") headerStatus = h["grpc-status"];
    });
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("close", () => {
      const all = Buffer.concat(chunks);
      for (let at = 0; at + 5 <= all.length; at += 5 + all.readUInt32BE(at + 1)) {
        if (all[at] !== 0x80) continue;
        const trailer = all.subarray(at + 5, at + 5 + all.readUInt32BE(at + 1)).toString("utf8");
        return resolve(/grpc-status: *(\d+)/i.exec(trailer)?.[1] ?? "no-status");
      }
      resolve(headerStatus ?? "no-status");
    });
    req.on("error", (err: Error) => resolve(`stream error: ${err.message}`));
    req.end(envelope(body));
  });
}

/** Runs `tasks` with a little concurrency, in order of submission. */
async function inParallel<T>(tasks: (() => Promise<T>)[], width = 6): Promise<T[]> {
  const results: T[] = new Array(tasks.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < tasks.length) {
        const i = next++;
        results[i] = await tasks[i]!();
      }
    }),
  );
  return results;
}

describe("edge fuzzing from the descriptors", () => {
  let ts: TestServer;
  let node: TestNode;
  let http: http2.ClientHttp2Session | undefined;
  let serviceHttp: http2.ClientHttp2Session | undefined;
  let connectOptions: http2.SecureClientSessionOptions;
  /** The shared connection (with the node's certificate), reopened if a protocol error closed it. */
  const session = () => {
    if (http === undefined || http.closed || http.destroyed) {
      http = http2.connect(ts.url, connectOptions);
      http.on("error", () => undefined);
    }
    return http;
  };
  /** DeploymentService refuses a node certificate: service clients connect without one. */
  const serviceSession = () => {
    if (serviceHttp === undefined || serviceHttp.closed || serviceHttp.destroyed) {
      serviceHttp = http2.connect(ts.url, { ca: ts.caPem });
      serviceHttp.on("error", () => undefined);
    }
    return serviceHttp;
  };

  const sessionWithCert = session;

  beforeAll(async () => {
    ts = await startTestServer();
    node = await enrollTestNode(ts, "fuzz-node");
    const state = await node.state();
    connectOptions = { ca: ts.caPem, cert: state.certPem, key: state.keyPem };
  });
  afterAll(async () => {
    http?.close();
    serviceHttp?.close();
    await ts?.stop();
  });

  it("answers every hostile unary and server-streaming request with a typed code", { timeout: 90_000 }, async () => {
    // Each service's own credential, so calls get past authentication to the body.
    const { secret } = await ts.admin.createServiceKey({ name: "fuzz", deployments: ["fuzzed"] });
    const headersOf = (service: DescService): Record<string, string> =>
      service === DeploymentService ? { authorization: `Bearer ${secret}` } : { "x-modelforge-admin-token": testAdminKey };
    const tasks: (() => Promise<Outcome>)[] = [];
    let methods = 0;
    for (const service of services) {
      for (const method of service.methods) {
        if (method.methodKind === "bidi_streaming") continue; // Session: its own test below
        // A user's own methods: a break-glass key is refused them at the edge, before any body.
        if (getOption(method, access) === Access.SELF) continue;
        methods++;
        const path = `/${service.typeName}/${method.name}`;
        const headers = headersOf(service);
        const session = service === DeploymentService ? serviceSession : sessionWithCert;
        for (const g of garbageBodies) {
          tasks.push(async () => ({ call: `${path} grpc ${g.label}`, code: await grpcCall(session(), path, g.bytes, headers) }));
          if (method.methodKind === "unary") {
            tasks.push(async () => ({ call: `${path} connect ${g.label}`, code: await connectCall(session(), path, g.bytes, headers) }));
            tasks.push(async () => ({ call: `${path} grpc-web ${g.label}`, code: await grpcWebCall(session(), path, g.bytes, headers) }));
          }
        }
        for (const v of variantsOf(method.input)) {
          tasks.push(async () => ({ call: `${path} ${v.label}`, code: await grpcCall(session(), path, v.bytes, headers) }));
        }
      }
    }
    const outcomes = await inParallel(tasks);
    const bad = outcomes.filter(
      (o) =>
        grpcForbidden.has(o.code) ||
        o.code === "internal" ||
        o.code === "unknown" ||
        o.code === "no-status" ||
        o.code.startsWith("stream error"),
    );
    const byCode = new Map<string, number>();
    for (const o of outcomes) byCode.set(o.code, (byCode.get(o.code) ?? 0) + 1);
    console.log(
      `fuzzed ${methods} methods with ${outcomes.length} requests; ${bad.length} answered badly; answers by code:`,
      Object.fromEntries(byCode),
    );
    // Undecodable bodies are the caller's mistake, in every protocol.
    const undecodable = outcomes.filter((o) => /(illegal tag|truncated length|bad wire type|random)$/.test(o.call));
    expect(undecodable.filter((o) => o.code !== "3" && o.code !== "invalid_argument").map((o) => `${o.call} -> ${o.code}`)).toEqual([]);
    expect(bad.map((o) => `${o.call} -> ${grpcForbidden.get(o.code) ?? o.code}`)).toEqual([]);

    // Still serving, and no stack of an unexpected failure in the log.
    await expect(ts.anonymousAgent.getServerInfo({})).resolves.toBeDefined();
    await expect(ts.admin.listNodes({})).resolves.toBeDefined();
    expect(failureLines(ts)).toEqual([]);
  });

  it("answers every hostile Session message with a typed refusal and keeps the stream", async () => {
    const client = createClient(
      AgentService,
      grpcTransport({
        baseUrl: ts.url,
        nodeOptions: { ca: ts.caPem, cert: (await node.state()).certPem, key: (await node.state()).keyPem },
      }),
    );
    const hello = (): SessionRequest =>
      create(SessionRequestSchema, {
        messageId: 0n,
        message: { case: "hello", value: { protocolVersion: supportedProtocolVersions[0]!, agentVersion: "fuzz" } },
      });

    // Opens a stream, says Hello, waits for Welcome; `send` answers one message or the stream's end.
    const open = async () => {
      const input = new AsyncQueue<SessionRequest>();
      const responses = client.session(input)[Symbol.asyncIterator]();
      input.push(hello());
      const first = await responses.next();
      expect(first.value?.message.case).toBe("welcome");
      return {
        input,
        async send(m: SessionRequest): Promise<string> {
          input.push(m);
          for (;;) {
            let r: IteratorResult<SessionResponse>;
            try {
              r = await responses.next();
            } catch (err) {
              return `stream ended: ${(err as { code?: number }).code}`;
            }
            if (r.done) return "stream ended cleanly";
            if (r.value.message.case === "reply" && r.value.message.value.messageId === m.messageId) {
              const result = r.value.message.value.result;
              return result.case === "error" ? result.value.code : "ok";
            }
          }
        },
      };
    };

    const outcomes: Outcome[] = [];
    let stream = await open();
    let id = 1n;
    for (const v of variantsOf(SessionRequestSchema)) {
      if (v.label.startsWith("hello") || v.label.startsWith("message_id")) continue;
      // Re-encode with a message id so the reply can be matched.
      const m = { ...fromBinary(SessionRequestSchema, v.bytes), messageId: id++ } as SessionRequest;
      const code = await stream.send(m);
      outcomes.push({ call: `Session ${v.label}`, code });
      if (code.startsWith("stream ended")) stream = await open();
    }
    stream.input.end();
    // A refused Hello ends the stream; it must say why with a typed code.
    for (const v of variantsOf(SessionRequestSchema).filter((x) => x.label.startsWith("hello."))) {
      const input = new AsyncQueue<SessionRequest>();
      input.push(fromBinary(SessionRequestSchema, v.bytes));
      let code = "ok";
      try {
        for await (const r of client.session(input)) {
          if (r.message.case === "welcome") break;
        }
      } catch (err) {
        code = String((err as { code?: number }).code);
      }
      input.end();
      outcomes.push({ call: `Session ${v.label}`, code });
    }
    const bad = outcomes.filter((o) => ["internal", "unknown", "stream ended: 13", "stream ended: 2", "13", "2"].includes(o.code));
    console.log(`fuzzed Session with ${outcomes.length} messages; ${bad.length} answered internal/unknown`);
    expect(bad.map((o) => `${o.call} -> ${o.code}`)).toEqual([]);
    await expect(ts.anonymousAgent.getServerInfo({})).resolves.toBeDefined();
    expect(failureLines(ts)).toEqual([]);
  });
});

describe("invoke payload fuzzing through a real agent and runtime", () => {
  let ts: TestServer;
  let agent: AgentProcess;
  let root: string;
  let client: ReturnType<typeof createClient<typeof DeploymentService>>;
  let secret: string;

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), "mf-fuzz-invoke-"));
    const file = join(root, "tiny.gguf");
    const model = await writeTinyLlamaGguf(file, { contextLength: 2048 });
    ts = await startTestServer({ MODELFORGE_HEARTBEAT_INTERVAL: "1s", MODELFORGE_APPROVED_ROOTS: root });
    const serving = await servingNode(ts, root, "fuzz-serving", 2048);
    agent = serving.agent;
    const node = serving.node;
    await serveTiny(ts.admin, { nodeId: node.nodeId, commit: "c".repeat(40), root, file, sha256: model.sha256 });
    secret = (await ts.admin.createServiceKey({ name: "fuzz", deployments: ["tiny"] })).secret;
    const bearer: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${secret}`);
      return next(req);
    };
    client = createClient(DeploymentService, grpcTransport({ baseUrl: ts.url, nodeOptions: { ca: ts.caPem }, interceptors: [bearer] }));
  }, 180_000);
  afterAll(async () => {
    await agent?.stop();
    await ts?.stop();
    if (root) rmSync(root, { recursive: true, force: true });
  }, 60_000);

  /** The call's Connect code name: "ok" when answered. */
  const outcome = (f: () => Promise<unknown>) =>
    f().then(
      () => "ok",
      (err: unknown) => Code[ConnectError.from(err).code],
    );

  it("answers every hostile payload or refuses it as invalid_argument: 0 internal, 0 error-level lines", { timeout: 600_000 }, async () => {
    const payloads = hostilePayloads();
    const tasks = payloads.map(
      (p) => async (): Promise<Outcome> => ({
        call: `Invoke ${p.label}`,
        code: await outcome(() => client.invoke({ deploymentId: "tiny", payload: p.payload })),
      }),
    );
    // The stream's own path for the shapes and the two fields every request carries.
    for (const p of payloads.filter((x) => !/^(chat|completion) /.test(x.label) || /(messages|prompt):/.test(x.label))) {
      tasks.push(async () => ({
        call: `InvokeStream ${p.label}`,
        code: await outcome(async () => {
          for await (const _ of client.invokeStream({ deploymentId: "tiny", payload: p.payload })) {
            /* drained */
          }
        }),
      }));
    }
    const outcomes = await inParallel(tasks, 4);
    const byCode = new Map<string, number>();
    for (const o of outcomes) byCode.set(o.code, (byCode.get(o.code) ?? 0) + 1);
    console.log(`fuzzed invoke with ${outcomes.length} payloads; answers by code:`, Object.fromEntries(byCode));
    expect(outcomes.filter((o) => o.code !== "ok" && o.code !== "InvalidArgument").map((o) => `${o.call} -> ${o.code}`)).toEqual([]);
    // Some reached the runtime and were answered; the runtime's refusals came back typed too.
    expect(byCode.get("ok") ?? 0).toBeGreaterThan(100);
    expect(errorLines(ts.logs())).toEqual([]);
    expect(failureLines(ts)).toEqual([]);
    expect(agent.output()).not.toMatch(/"level":(50|60)/);
    // Deadlines in the gRPC header down to the nanosecond: typed answers too (a fraction of a
    // millisecond once failed to encode as the Duration sent to the node).
    const request = toBinary(
      InvokeRequestSchema,
      create(InvokeRequestSchema, { deploymentId: "tiny", payload: Buffer.from('{"prompt":"a","max_tokens":2}') }),
    );
    const raw = http2.connect(ts.url, { ca: ts.caPem });
    raw.on("error", () => undefined);
    try {
      for (const timeout of ["1n", "999999n", "1234567n", "1500u", "2m", "99999999n"]) {
        const status = await grpcCall(raw, "/modelforge.deployment.v1.DeploymentService/Invoke", request, {
          authorization: `Bearer ${secret}`,
          "grpc-timeout": timeout,
        });
        // Answered (a message came), canceled (the deadline ended its wait), deadline_exceeded, or
        // resource_exhausted: the runtime generates one request at a time and the previous probe's
        // generation, cut by its deadline, may still be stopping on a busy machine.
        expect(["ok-streaming", "0", "1", "4", "8"], `grpc-timeout ${timeout} -> ${status}`).toContain(status);
      }
    } finally {
      raw.close();
    }
    expect(errorLines(ts.logs())).toEqual([]);
    // Still serving.
    await expect(client.invoke({ deploymentId: "tiny", payload: Buffer.from('{"prompt":"ok","max_tokens":2}') })).resolves.toBeDefined();
  });

  it("answers every hostile payload on the OpenAI API in OpenAI's shape: 200 or 4xx, 0 server errors, 0 error-level lines", {
    timeout: 600_000,
  }, async () => {
    const session = http2.connect(ts.url, { ca: ts.caPem });
    session.on("error", () => undefined);
    try {
      const headers = { authorization: `Bearer ${secret}` };
      const tasks = hostilePayloads().map((p) => async (): Promise<Outcome> => {
        // The deployment is the body's model: put first, so a fuzzed "model" later in the body wins.
        const text = Buffer.from(p.payload).toString("latin1");
        const payload = text.trimStart().startsWith("{") ? Buffer.from(text.replace("{", '{"model":"tiny",'), "latin1") : p.payload;
        const path = p.label.startsWith("completion ") ? "/v1/completions" : "/v1/chat/completions";
        const answer = await call(session, path, "application/json", { bytes: payload.length, data: Buffer.from(payload) }, headers);
        return { call: `${path} ${p.label}`, code: answer.code };
      });
      const outcomes = await inParallel(tasks, 4);
      const byCode = new Map<string, number>();
      for (const o of outcomes) byCode.set(o.code, (byCode.get(o.code) ?? 0) + 1);
      console.log(`fuzzed the OpenAI API with ${outcomes.length} payloads; answers by code:`, Object.fromEntries(byCode));
      const allowed = new Set(["ok", "invalid_request", "model_not_found", "request_too_large"]);
      expect(outcomes.filter((o) => !allowed.has(o.code)).map((o) => `${o.call} -> ${o.code}`)).toEqual([]);
      expect(byCode.get("ok") ?? 0).toBeGreaterThan(100);
      expect(errorLines(ts.logs())).toEqual([]);
      expect(agent.output()).not.toMatch(/"level":(50|60)/);
    } finally {
      session.close();
    }
  });
});
