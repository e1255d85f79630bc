// The Session stream. The agent says Hello first; the server answers Welcome (configuration and
// pending instructions), then answers each agent message with a Reply carrying its message_id and
// pushes leases, cancellations and instructions whenever it has them. A refused message gets a
// ReplyError and the stream stays open; revocation, disable, decommission, shutdown or a newer
// session of the same node end it.
import { Code, ConnectError } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import {
  ReplyErrorSchema,
  ReplySchema,
  SessionResponseSchema,
  WelcomeSchema,
  type Reply,
  type SessionRequest,
  type SessionResponse,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { Node } from "../../gen/prisma/client.js";
import type { Deps } from "../app.js";
import type { NodeIdentity } from "../auth/node.js";
import { AsyncQueue } from "../../common/queue.js";
import { codeName } from "../../common/codes.js";
import type { Caller } from "../context.js";
import { serverVersion, supportedProtocolVersions } from "../version.js";
import { pendingInstructions } from "../dispatch/instructions.js";
import type { LiveSession } from "../dispatch/sessions.js";
import { putInventory, putTelemetry } from "../nodes/reports.js";
import { heartbeatResponse } from "./agent.js";

type Result = Reply["result"];

/** Answers one agent message; jobs add their cases through `deps.jobs`. */
async function answer(deps: Deps, nodeId: string, msg: SessionRequest, correlationId: string): Promise<Result> {
  const m = msg.message;
  switch (m.case) {
    case "heartbeat":
      deps.heartbeats.record(nodeId, Date.now());
      // Pending instructions reach a connected node as pushes; none need repeating here.
      return { case: "heartbeat", value: heartbeatResponse(deps, []) };
    case "inventory":
      return { case: "inventory", value: await putInventory(deps, nodeId, m.value.report, correlationId) };
    case "telemetry":
      return { case: "telemetry", value: await putTelemetry(deps, nodeId, m.value.report) };
    case "jobProgress":
    case "jobComplete":
    case "jobFail":
      return deps.jobs.answer(nodeId, m);
    case "hello":
      throw new ConnectError("hello was already received", Code.InvalidArgument);
    default:
      throw new ConnectError("empty or unknown session message", Code.InvalidArgument);
  }
}

export async function* openSession(
  deps: Deps,
  node: Node,
  identity: NodeIdentity,
  requests: AsyncIterable<SessionRequest>,
  caller: Caller,
): AsyncGenerator<SessionResponse> {
  const inbound = requests[Symbol.asyncIterator]();
  const first = await inbound.next();
  if (first.done) return;
  if (first.value.message.case !== "hello") {
    throw new ConnectError("the first session message must be hello", Code.InvalidArgument);
  }
  const hello = first.value.message.value;
  if (!supportedProtocolVersions.includes(hello.protocolVersion)) {
    throw new ConnectError(
      `protocol version ${hello.protocolVersion} is not supported; this server accepts ${supportedProtocolVersions.join(", ")}`,
      Code.Aborted,
    );
  }
  const capabilities = [...new Set(hello.capabilities)].slice(0, 256);
  const cursors = await deps.db.prisma.streamCursor.findMany({ where: { nodeId: node.id }, select: { stream: true, sequence: true } });
  await deps.db.prisma.node.update({
    where: { id: node.id },
    data: { agentVersion: hello.agentVersion.slice(0, 64) || null, protocolVersion: hello.protocolVersion, capabilities },
  });
  deps.heartbeats.record(node.id, Date.now());

  const outbox = new AsyncQueue<SessionResponse>();
  const live: LiveSession = {
    nodeId: node.id,
    serial: identity.serial,
    send: (m) => outbox.push(m),
    close: (reason) => outbox.fail(reason),
  };
  const onShutdown = () => outbox.fail(new ConnectError("server shutting down", Code.Unavailable));
  deps.shutdown.addEventListener("abort", onShutdown, { once: true });
  deps.sessions.attach(live);
  try {
    caller.log.info({ nodeId: node.id, agentVersion: hello.agentVersion, capabilities }, "session opened");
    outbox.push(
      create(SessionResponseSchema, {
        message: {
          case: "welcome",
          value: create(WelcomeSchema, {
            nodeId: node.id,
            serverVersion,
            config: deps.agentConfig,
            instructions: pendingInstructions(node),
            streamSequences: Object.fromEntries(cursors.map((c) => [c.stream, c.sequence])),
          }),
        },
      }),
    );
    await deps.jobs.sessionOpened(node.id, hello.runningJobIds, caller.correlationId);
    pumpInbound(deps, node.id, inbound, outbox, caller);
    yield* outbox;
  } finally {
    deps.sessions.detach(live);
    deps.shutdown.removeEventListener("abort", onShutdown);
    caller.log.info({ nodeId: node.id }, "session closed");
  }
}

/** Answers agent messages one at a time, in order, while pushes interleave freely. */
function pumpInbound(
  deps: Deps,
  nodeId: string,
  inbound: AsyncIterator<SessionRequest>,
  outbox: AsyncQueue<SessionResponse>,
  caller: Caller,
): void {
  const pump = (async () => {
    for (;;) {
      const next = await inbound.next();
      if (next.done) break;
      const msg = next.value;
      let result: Result;
      try {
        result = await answer(deps, nodeId, msg, caller.correlationId);
      } catch (err) {
        const ce = ConnectError.from(err);
        if (!(err instanceof ConnectError)) caller.log.error({ nodeId, error: ce.message }, "session message failed");
        else caller.log.warn({ nodeId, message: msg.message.case, code: codeName(ce.code), reason: ce.rawMessage }, "session message refused");
        const message = err instanceof ConnectError ? ce.rawMessage : `internal error (request ${caller.correlationId})`;
        result = { case: "error", value: create(ReplyErrorSchema, { code: codeName(ce.code), message }) };
      }
      outbox.push(create(SessionResponseSchema, { message: { case: "reply", value: create(ReplySchema, { messageId: msg.messageId, result }) } }));
    }
    outbox.end();
  })();
  pump.catch((err: unknown) => outbox.fail(err));
}
