// The agent's hand-framed Session call (agent/session/grpc-session.ts) against a real HTTP/2
// server answering as a control plane does, and as a broken or refusing one might: each outcome is
// held to what Connect's own gRPC client makes of the same answer (the code, and the message where
// the server wrote it), since the run loop's backoff, refusal advice and metrics read those.
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  AgentService,
  SessionRequestSchema,
  SessionResponseSchema,
  type SessionRequest,
  type SessionResponse,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { grpcTransport, SteadySessionManager } from "../../common/http2-sessions.js";
import { FrameReader, frame } from "../../common/grpc-frames.js";
import { grpcSession, maxResponseBytes } from "../../agent/session/grpc-session.js";
import { invokeAnswerRequest } from "../../agent/deployments/invoke-answer.js";
import { AsyncQueue } from "../../common/queue.js";

type Answer = (stream: http2.ServerHttp2Stream, received: SessionRequest[]) => void;

let server: http2.Http2Server;
let url: string;
let answer: Answer = () => undefined;
/** What the server read on each call, and whether the agent half-closed its side. */
const calls: { received: SessionRequest[]; ended: boolean; path: string; headers: http2.IncomingHttpHeaders }[] = [];

beforeAll(async () => {
  server = http2.createServer();
  server.on("stream", (stream, headers) => {
    const call = { received: [] as SessionRequest[], ended: false, path: String(headers[":path"]), headers };
    calls.push(call);
    const reader = new FrameReader("/test", 1 << 20);
    stream.on("data", (chunk: Buffer) => {
      for (const bytes of reader.push(chunk)) call.received.push(fromBinary(SessionRequestSchema, bytes));
    });
    stream.on("end", () => (call.ended = true));
    stream.on("error", () => undefined);
    answer(stream, call.received);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

const welcome = create(SessionResponseSchema, { message: { case: "welcome", value: { nodeId: "n1", serverVersion: "1.0.0" } } });
const hello = create(SessionRequestSchema, {
  messageId: 1n,
  message: { case: "hello", value: { protocolVersion: 1, agentVersion: "1.0.0" } },
});
const grpcHeaders = { ":status": 200, "content-type": "application/grpc+proto" };

/** What a call through `session` yields and how it ends, with `requests` sent and then closed. */
async function outcome(
  which: "ours" | "connect",
  requests: SessionRequest[],
  signal = new AbortController().signal,
): Promise<{ messages: SessionResponse[]; error?: ConnectError }> {
  const manager = new SteadySessionManager(url);
  const outbox = new AsyncQueue<SessionRequest>();
  for (const r of requests) outbox.push(r);
  outbox.end();
  const session =
    which === "ours"
      ? grpcSession(manager, outbox, { signal })
      : createClient(AgentService, grpcTransport({ baseUrl: url, sessionManager: manager })).session(outbox, { signal });
  const messages: SessionResponse[] = [];
  try {
    for await (const m of session) messages.push(m);
    return { messages };
  } catch (err) {
    return { messages, error: ConnectError.from(err) };
  } finally {
    manager.abort();
  }
}

/** Both clients' outcomes of the same answer. */
async function both(a: Answer, requests: SessionRequest[] = [hello]) {
  answer = a;
  return { ours: await outcome("ours", requests), connect: await outcome("connect", requests) };
}

describe("the agent's hand-framed Session", () => {
  it("sends its messages in order, half-closes, and reads the server's until a clean end", async () => {
    const chunk = invokeAnswerRequest({
      invokeId: 3n,
      contentType: "application/json",
      payload: Buffer.from("{}"),
      done: false,
      revision: 1n,
    });
    calls.length = 0;
    const { ours, connect } = await both(
      (stream) => {
        stream.respond(grpcHeaders, { waitForTrailers: true });
        stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
        // Two messages in one write, the second split across two.
        const second = frame(toBinary(SessionResponseSchema, welcome));
        stream.write(Buffer.concat([frame(toBinary(SessionResponseSchema, welcome)), second.subarray(0, 4)]));
        setTimeout(() => stream.end(second.subarray(4)), 20);
      },
      [hello, chunk, hello],
    );
    expect(ours.error).toBeUndefined();
    expect(ours.messages).toEqual([welcome, welcome]);
    expect(connect.messages).toEqual(ours.messages);
    expect(calls[0]!.path).toBe("/modelforge.agent.v1.AgentService/Session");
    expect(calls[0]!.headers["content-type"]).toBe("application/grpc+proto");
    expect(calls[0]!.headers.te).toBe("trailers");
    expect(calls[0]!.received).toEqual([hello, chunk, hello]);
    expect(calls[0]!.ended).toBe(true);
  });

  it.each<[string, Answer]>([
    [
      "a refusal in a trailers-only response",
      (stream) =>
        stream.respond(
          {
            ...grpcHeaders,
            "grpc-status": String(Code.Unauthenticated),
            "grpc-message": encodeURIComponent("certificate revoked: ünknown"),
          },
          { endStream: true },
        ),
    ],
    [
      "a refusal after messages, with a retry hint",
      (stream) => {
        stream.respond(grpcHeaders, { waitForTrailers: true });
        stream.on("wantTrailers", () =>
          stream.sendTrailers({ "grpc-status": String(Code.Unavailable), "grpc-message": "draining", "retry-after": "3" }),
        );
        stream.end(frame(toBinary(SessionResponseSchema, welcome)));
      },
    ],
    [
      "a version refusal",
      (stream) =>
        stream.respond(
          { ...grpcHeaders, "grpc-status": String(Code.FailedPrecondition), "grpc-message": "too%20old" },
          { endStream: true },
        ),
    ],
    [
      "an HTTP error before gRPC (a proxy, a server starting)",
      (stream) => stream.respond({ ":status": 503, "content-type": "application/json" }, { endStream: true }),
    ],
    ["an HTTP 404", (stream) => stream.respond({ ":status": 404 }, { endStream: true })],
    ["not gRPC at all", (stream) => stream.respond({ ":status": 200, "content-type": "text/html" }, { endStream: true })],
    [
      "an end without a status",
      (stream) => {
        stream.respond(grpcHeaders);
        stream.end(frame(toBinary(SessionResponseSchema, welcome)));
      },
    ],
    ["a status that is no code", (stream) => stream.respond({ ...grpcHeaders, "grpc-status": "99" }, { endStream: true })],
    [
      "a stream refused with RST_STREAM",
      (stream) => {
        stream.respond(grpcHeaders);
        stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
      },
    ],
    [
      "a stream reset with an internal error",
      (stream) => {
        stream.respond(grpcHeaders);
        stream.write(frame(toBinary(SessionResponseSchema, welcome)));
        setTimeout(() => stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR), 20);
      },
    ],
    [
      "a compressed message",
      (stream) => {
        stream.respond(grpcHeaders);
        const bytes = frame(toBinary(SessionResponseSchema, welcome));
        bytes[0] = 1;
        stream.end(bytes);
      },
    ],
  ])("ends as Connect's client does on %s", async (_, a) => {
    const { ours, connect } = await both(a);
    expect(ours.error).toBeInstanceOf(ConnectError);
    expect(connect.error).toBeInstanceOf(ConnectError);
    expect(Code[ours.error!.code]).toBe(Code[connect.error!.code]);
    expect(ours.messages).toEqual(connect.messages);
    // What the server wrote reaches the run loop as it was written: the reason, the retry hint.
    if (connect.error!.code !== Code.Internal && connect.error!.code !== Code.Unknown)
      expect(ours.error!.rawMessage).toBe(connect.error!.rawMessage);
    expect(ours.error!.metadata.get("retry-after")).toBe(connect.error!.metadata.get("retry-after"));
  });

  it("refuses a message over its bound on the declared length, before holding it", async () => {
    answer = (stream) => {
      stream.respond(grpcHeaders);
      const head = Buffer.alloc(5);
      head.writeUInt32BE(maxResponseBytes + 1, 1);
      stream.write(head);
    };
    const { error } = await outcome("ours", [hello]);
    expect(error?.code).toBe(Code.ResourceExhausted);
  });

  it("a message cut short by the end of the stream is an error, not a clean end", async () => {
    answer = (stream) => {
      stream.respond(grpcHeaders, { waitForTrailers: true });
      stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
      stream.end(frame(toBinary(SessionResponseSchema, welcome)).subarray(0, 8));
    };
    const { error } = await outcome("ours", [hello]);
    expect(error?.code).toBe(Code.Internal);
  });

  it("cancels the stream at the server when the agent ends the session", async () => {
    let serverClosed: (rst: number) => void = () => undefined;
    const closed = new Promise<number>((resolve) => (serverClosed = resolve));
    answer = (stream) => {
      stream.respond(grpcHeaders);
      stream.write(frame(toBinary(SessionResponseSchema, welcome)));
      stream.on("close", () => serverClosed(stream.rstCode));
    };
    const stop = new AbortController();
    const manager = new SteadySessionManager(url);
    const outbox = new AsyncQueue<SessionRequest>();
    outbox.push(hello);
    const seen: SessionResponse[] = [];
    let error: unknown;
    try {
      for await (const m of grpcSession(manager, outbox, { signal: stop.signal })) {
        seen.push(m);
        stop.abort(new ConnectError("no heartbeat answer", Code.DeadlineExceeded));
      }
    } catch (err) {
      error = err;
    } finally {
      manager.abort();
    }
    expect(seen).toEqual([welcome]);
    expect((error as ConnectError).code).toBe(Code.DeadlineExceeded);
    expect(await closed).toBe(http2.constants.NGHTTP2_CANCEL);
  });

  it("gives up at once when the session ends while connecting", async () => {
    const stop = new AbortController();
    stop.abort(new ConnectError("no Welcome", Code.DeadlineExceeded));
    const manager = new SteadySessionManager(url);
    await expect(
      grpcSession(manager, new AsyncQueue<SessionRequest>(), { signal: stop.signal })[Symbol.asyncIterator]().next(),
    ).rejects.toMatchObject({
      code: Code.DeadlineExceeded,
    });
    manager.abort();
  });

  it("fails as unavailable when nothing listens, as Connect's client does", async () => {
    const closedPort = http2.createServer();
    await new Promise<void>((resolve) => closedPort.listen(0, "127.0.0.1", resolve));
    const port = (closedPort.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closedPort.close(() => resolve()));
    const saved = url;
    url = `http://127.0.0.1:${port}`;
    try {
      const ours = await outcome("ours", [hello]);
      const connect = await outcome("connect", [hello]);
      expect(ours.error?.code).toBe(Code.Unavailable);
      expect(connect.error?.code).toBe(Code.Unavailable);
    } finally {
      url = saved;
    }
  });
});
