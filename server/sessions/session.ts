// The Session stream. The agent says Hello first; the server answers Welcome (configuration and
// pending instructions), then answers each agent message with a Reply carrying its message_id and
// pushes leases, cancellations and instructions whenever it has them. A refused message gets a
// ReplyError and the stream stays open; revocation, disable, decommission, shutdown or a newer
// session of the same node end it.
//
// A session is one event-driven object per stream (no queues, generators or promise per message):
// a server holds thousands of them, and heartbeats, which need no I/O, are answered synchronously.
// The transports (./session-grpc.ts on the raw HTTP/2 stream, `connectSession` below for Connect
// and gRPC-Web) feed it messages and give it a sink to write to.
import { Code, ConnectError } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import {
  HeartbeatResponseSchema,
  ReplyErrorSchema,
  ReplySchema,
  SessionRequestSchema,
  SessionResponseSchema,
  WelcomeSchema,
  type Hello,
  type HeldDeployment,
  type Reply,
  type ReplicaLoad,
  type SessionRequest,
  type SessionResponse,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { Node, PrismaClient } from "../../gen/prisma/client.js";
import type { AgentConfig } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { AgentUpdateReport } from "../../gen/proto/modelforge/agent/v1/agent_update_pb.js";
import type { Clock } from "../../common/clock.js";
import type { NodeIdentity } from "../identity/node-auth.js";
import type { OpeningReads } from "./open.js";
import { AsyncQueue } from "../../common/queue.js";
import { codeName } from "../../common/codes.js";
import type { Caller } from "../context.js";
import { serverVersion, supportedProtocolVersions } from "../version.js";
import { pendingInstructions } from "../nodes/instructions.js";
import { shuttingDown, type SessionRegistry } from "./registry.js";
import type { InvokePush, LiveSession } from "../node-sessions.js";
import type { Admission } from "./admission.js";
import type { HeartbeatBook } from "../liveness/heartbeats.js";
import type { JobDispatch } from "../jobs/dispatch.js";
import { putInventory, putTelemetry, type ReportDeps } from "../nodes/reports.js";
import { publicError } from "../observability/call-log.js";
import type { OutageSink } from "../db/availability.js";
import { sessionMessageViolation } from "../edge/validate.js";
import { partitionCapabilities } from "../../common/capabilities.js";
import { knownEngines, knownEnginesAndBackends } from "../../common/engines.js";
import type { SessionMetrics } from "../observability/metrics.js";
import { agentVersionRefusal } from "../agent-version.js";
import { emptyReplyBytes, heartbeatReplyBytes } from "./heartbeat-wire.js";
import { invokeStartBytes, invokeStartMessage } from "./invoke-wire.js";

type Result = Reply["result"];

/** Where a session's responses go: the transport's side of the stream. */
export interface SessionSink {
  /** Writes one message to the agent. */
  send(message: SessionResponse): void;
  /** Writes one message already encoded (a heartbeat's reply, ./heartbeat-wire.ts), where the transport writes bytes. */
  sendEncoded?(message: Uint8Array): void;
  /** Ends the stream once: cleanly when `error` is undefined, otherwise with that status. */
  end(error: ConnectError | undefined): void;
}

/** What a Session works with. */
export interface SessionDeps {
  prisma: PrismaClient;
  /** Each open's read, batched with the others waiting (./open.ts). */
  openingReads: OpeningReads;
  clock: Clock;
  /** What agents are told in Welcome. */
  agentConfig: AgentConfig;
  sessions: SessionRegistry;
  heartbeats: HeartbeatBook;
  /** Bounds how many sessions open (hit the database) at once. */
  admission: Admission;
  reports: ReportDeps;
  jobs: JobDispatch;
  /** Told what deployment runtimes a node holds (its Hello, or later when one dies); never rejects. */
  deployments?: { held(nodeId: string, held: HeldDeployment[]): Promise<void> };
  /** Told of each session open, with the outcome of the agent's last self-update (server/agents/). */
  upgrades?: { sessionOpened(nodeId: string, lastUpdate: AgentUpdateReport | undefined): void };
  /** Aborted when shutdown begins; the server then ends every attached session (server/start/sessions.ts). */
  shutdown: AbortSignal;
  /** Hears of database connectivity failures (logged once per outage, answered unavailable). */
  outage?: OutageSink;
  /** Relayed invokes and log watches (server/invoke/): their agent messages need no I/O. */
  relay?: SessionRelay;
  metrics?: SessionMetrics | undefined;
  /** The oldest agent version accepted at Hello (../agent-version.ts). */
  minAgentVersion: string;
}

/** Takes the agent's invoke answers and log lines, and hears when a session ends. */
export interface SessionRelay {
  fromAgent(session: LiveSession, message: SessionRequest): void;
  sessionClosed(session: LiveSession): void;
}

/** Agent messages for the relay: answered at once, never queued behind a database write. */
const isRelayed = (m: SessionRequest) => m.message.case === "invokeAnswer" || m.message.case === "logLines";

/** Answers one agent message that needs I/O; jobs add their cases through `deps.jobs`. */
async function answer(deps: SessionDeps, nodeId: string, msg: SessionRequest, correlationId: string): Promise<Result> {
  const m = msg.message;
  switch (m.case) {
    case "inventory":
      return { case: "inventory", value: await putInventory(deps.reports, nodeId, m.value.report, correlationId) };
    case "telemetry":
      return { case: "telemetry", value: await putTelemetry(deps.reports, nodeId, m.value.report) };
    case "jobProgress":
    case "jobComplete":
    case "jobFail":
      return deps.jobs.answer(nodeId, m);
    case "heldDeployments":
      // A runtime died on the node: the controller stops routing to it and loads it again.
      void deps.deployments?.held(nodeId, m.value.deployments);
      return { case: undefined };
    case "hello":
      throw new ConnectError("hello was already received", Code.InvalidArgument);
    default:
      throw new ConnectError("empty or unknown session message", Code.InvalidArgument);
  }
}

/** Refuses a Hello this server cannot talk to; returns the capabilities it records and those it ignores. */
function acceptHello(first: SessionRequest, minAgentVersion: string): { hello: Hello; capabilities: string[]; ignored: string[] } {
  if (first.message.case !== "hello") {
    throw new ConnectError("the first session message must be hello", Code.InvalidArgument);
  }
  const hello = first.message.value;
  if (!supportedProtocolVersions.includes(hello.protocolVersion)) {
    throw new ConnectError(
      `protocol version ${hello.protocolVersion} is not supported; this server accepts ${supportedProtocolVersions.join(", ")}`,
      Code.Aborted,
    );
  }
  // Before the database: an agent this server would refuse costs it nothing. failed_precondition, so
  // the agent knows retrying soon will not help (agent/session/version-refusal.ts).
  const tooOld = agentVersionRefusal(hello.agentVersion, minAgentVersion, serverVersion);
  if (tooOld !== undefined) throw new ConnectError(tooOld, Code.FailedPrecondition);
  // The edge has bounded the names; only those of the contract are recorded, the rest reported back.
  const { known, unknown } = partitionCapabilities(hello.capabilities);
  return { hello, capabilities: known, ignored: unknown };
}

const sameList = (a: string[], b: string[]) => a.length === b.length && a.every((x, i) => x === b[i]);

function sameHello(node: Node, said: Pick<Node, "agentVersion" | "protocolVersion" | "capabilities" | "engines">): boolean {
  return (
    node.agentVersion === said.agentVersion &&
    node.protocolVersion === said.protocolVersion &&
    sameList(node.capabilities, said.capabilities) &&
    sameList(node.engines, said.engines)
  );
}

/** The last answer to an invoke whose own answer the edge refused: the node's fault, so internal to the caller. */
function refusedAnswer(invokeId: bigint, refusal: Result): SessionRequest {
  const reason = refusal.case === "error" ? refusal.value.message : "refused";
  return create(SessionRequestSchema, {
    message: {
      case: "invokeAnswer",
      value: { invokeId, done: true, error: { code: "internal", message: `the node's answer was refused: ${reason}` } },
    },
  });
}

function replyTo(messageId: bigint, result: Result): SessionResponse {
  return create(SessionResponseSchema, { message: { case: "reply", value: create(ReplySchema, { messageId, result }) } });
}

type Phase = "hello" | "open" | "closed";

/** Messages an agent may have waiting behind one that is being answered. */
const maxBacklog = 1000;

const noQueues: ReadonlyMap<string, number> = new Map();
const queueKey = (deploymentId: string, revision: bigint, replica: number) => `${deploymentId}/${revision}/${replica}`;

/**
 * One node's Session on this replica. Agent messages are answered strictly in order, one at a
 * time (a message that waits on the database holds back the ones after it); pushes from the
 * registry interleave freely.
 */
export class AgentSession implements LiveSession {
  readonly nodeId: string;
  readonly serial: string;
  /** From Hello, in memory only: what relaying an embeddings invoke to this agent needs. */
  embeddingEngines: readonly string[] = [];
  /** From the latest heartbeat, in memory only: each busy replica's queue on the node, which routing weighs. */
  private queues: ReadonlyMap<string, number> = noQueues;
  private phase: Phase = "hello";
  /** Messages received while an earlier one is still being answered. */
  private backlog: SessionRequest[] | undefined;
  private busy = false;
  private inputEnded = false;

  constructor(
    private readonly deps: SessionDeps,
    private readonly identity: NodeIdentity,
    private readonly caller: Caller,
    private readonly sink: SessionSink,
  ) {
    this.nodeId = identity.nodeId;
    this.serial = identity.serial;
  }

  /** Read through a getter so checks after an await are not narrowed away. */
  private get closed(): boolean {
    return this.phase === "closed";
  }

  /** An agent message arrived. */
  receive(message: SessionRequest): void {
    if (this.phase === "closed") return;
    if (this.phase === "open" && isRelayed(message)) return this.relayed(message);
    if (!this.busy) return this.handle(message);
    this.backlog ??= [];
    const backlog = this.backlog;
    // An agent waits for answers; one that floods the stream while a message waits is refused.
    if (backlog.length >= maxBacklog)
      return this.close(new ConnectError(`more than ${maxBacklog} messages waiting for an answer`, Code.ResourceExhausted));
    backlog.push(message);
  }

  /**
   * A plain heartbeat, read straight off the wire (./heartbeat-wire.ts: one the edge check passes).
   * Answered at once when nothing waits before it; otherwise in order, as any message.
   */
  receiveHeartbeat(messageId: bigint): void {
    if (this.phase === "open" && !this.busy) return this.answerHeartbeat(messageId);
    this.receive(create(SessionRequestSchema, { messageId, message: { case: "heartbeat", value: {} } }));
  }

  /**
   * An invoke answer read straight off the wire (./invoke-wire.ts: one the edge check passes),
   * handed on at once; before the session is open it is received as any message.
   */
  receiveInvokeAnswer(message: SessionRequest): void {
    if (this.phase === "open") return this.passOn(message);
    this.receive(message);
  }

  /** The agent closed its side: answer what is pending, then end cleanly. */
  endInput(): void {
    this.inputEnded = true;
    if (!this.busy) this.close(undefined);
  }

  /** LiveSession: what the node last reported waiting for a replica's runtime. */
  queuedAt(deploymentId: string, revision: bigint, replica: number): number {
    return this.queues.get(queueKey(deploymentId, revision, replica)) ?? 0;
  }

  /** LiveSession: a push from the server. False once the session has ended. */
  send(message: SessionResponse): boolean {
    if (this.phase !== "open") return false;
    this.sink.send(message);
    return true;
  }

  /** LiveSession: an InvokeStart, encoded by hand where the transport takes bytes. */
  sendInvoke(start: InvokePush): boolean {
    if (this.phase !== "open") return false;
    if (this.sink.sendEncoded !== undefined) this.sink.sendEncoded(invokeStartBytes(start));
    else this.sink.send(invokeStartMessage(start));
    return true;
  }

  /** Ends the session once (revocation, replacement, shutdown, transport gone, or a fatal error). */
  close(reason: unknown): void {
    if (this.phase === "closed") return;
    const wasOpen = this.phase === "open";
    this.phase = "closed";
    this.backlog = undefined;
    if (wasOpen) {
      this.deps.sessions.detach(this);
      if (!this.deps.shutdown.aborted) this.deps.heartbeats.release(this.nodeId);
      this.deps.relay?.sessionClosed(this);
      // Debug, as a reconnect's open: why a session failed is logged below, and a node gone for
      // good shows as its liveness moving to stale and offline.
      this.caller.log.debug({ nodeId: this.nodeId }, "session closed");
    }
    if (reason === undefined) return this.sink.end(undefined);
    // Not ours to show the agent (a bug): logged here, a plain status there. A database outage is
    // `unavailable`, which the agent retries.
    const { error, level, detail } = publicError(reason, this.caller.correlationId, this.deps.outage);
    if (!wasOpen) this.deps.metrics?.refused(error.code);
    if (detail !== undefined) this.caller.log[level]({ nodeId: this.nodeId, error: detail.message }, "session failed");
    this.sink.end(error);
  }

  /** Takes backlog messages until one needs to wait. */
  private next(): void {
    this.busy = false;
    while (!this.busy && this.phase !== "closed") {
      const message = this.backlog?.shift();
      if (message === undefined) {
        if (this.inputEnded) this.close(undefined);
        return;
      }
      this.handle(message);
    }
  }

  private handle(message: SessionRequest): void {
    // The edge check every request gets: a bad Hello ends the stream, any other bad message is
    // refused alone and the stream stays open.
    const invalid = sessionMessageViolation(SessionRequestSchema, message);
    if (invalid !== undefined) {
      return this.phase === "hello" ? this.close(invalid) : this.sink.send(replyTo(message.messageId, this.refusal(message, invalid)));
    }
    if (this.phase === "hello") {
      this.busy = true;
      let said: ReturnType<typeof acceptHello>;
      try {
        said = acceptHello(message, this.deps.minAgentVersion);
      } catch (err) {
        return this.close(err);
      }
      this.deps.admission
        .run(() => this.open(said))
        .then(
          () => this.next(),
          (err: unknown) => this.close(err),
        );
      return;
    }
    if (message.message.case === "heartbeat") return this.answerHeartbeat(message.messageId, message.message.value.replicaLoads);
    this.busy = true;
    answer(this.deps, this.nodeId, message, this.caller.correlationId)
      .catch((err: unknown) => this.refusal(message, err))
      .then((result) => {
        if (this.phase !== "open") return;
        this.sink.send(replyTo(message.messageId, result));
        this.next();
      })
      .catch((err: unknown) => this.close(err));
  }

  /**
   * No I/O: answered at once. Pending instructions and configuration reach a connected node as
   * pushes, so the reply is only the server's clock: the hot path of a fleet stays small.
   */
  private answerHeartbeat(messageId: bigint, loads: readonly ReplicaLoad[] = []): void {
    this.deps.heartbeats.record(this.nodeId, this.deps.clock.now());
    // Each heartbeat lists every busy replica: one unlisted (a plain heartbeat lists none) is idle.
    this.queues = loads.length === 0 ? noQueues : new Map(loads.map((l) => [queueKey(l.deploymentId, l.revision, l.replica), l.queued]));
    this.deps.metrics?.heartbeat();
    if (this.sink.sendEncoded !== undefined) return this.sink.sendEncoded(heartbeatReplyBytes(messageId, Date.now()));
    this.sink.send(replyTo(messageId, { case: "heartbeat", value: create(HeartbeatResponseSchema, { serverTime: timestampNow() }) }));
  }

  /**
   * An invoke answer or log lines: checked at the edge like every message, handed on, and
   * acknowledged unless numbered 0 (no reply wanted). A refused answer fails its request at once:
   * an agent that wants no reply never hears of the refusal, and the caller would wait out its deadline.
   */
  private relayed(message: SessionRequest): void {
    const invalid = sessionMessageViolation(SessionRequestSchema, message);
    if (invalid !== undefined) {
      const refusal = this.refusal(message, invalid);
      if (message.message.case === "invokeAnswer") this.deps.relay?.fromAgent(this, refusedAnswer(message.message.value.invokeId, refusal));
      if (message.messageId !== 0n) this.sink.send(replyTo(message.messageId, refusal));
      return;
    }
    this.passOn(message);
  }

  /** A relayed message that passed the edge check: to the relay, acknowledged unless numbered 0. */
  private passOn(message: SessionRequest): void {
    this.deps.relay?.fromAgent(this, message);
    if (message.messageId === 0n) return;
    if (this.sink.sendEncoded !== undefined) return this.sink.sendEncoded(emptyReplyBytes(message.messageId));
    this.sink.send(replyTo(message.messageId, { case: undefined }));
  }

  private refusal(message: SessionRequest, err: unknown): Result {
    const { error, level, detail } = publicError(err, this.caller.correlationId, this.deps.outage);
    const fields = { nodeId: this.nodeId, message: message.message.case, code: codeName(error.code) };
    if (detail !== undefined) this.caller.log[level]({ ...fields, error: detail.message }, "session message failed");
    else this.caller.log[level]({ ...fields, reason: error.rawMessage }, "session message refused");
    return { case: "error", value: create(ReplyErrorSchema, { code: codeName(error.code), message: error.rawMessage }) };
  }

  /** Authorizes the credential, records Hello and answers Welcome: the database part of opening. */
  private async open({ hello, capabilities, ignored }: ReturnType<typeof acceptHello>): Promise<void> {
    if (this.closed) return; // gone while waiting for admission
    const prisma = this.deps.prisma;
    // One round trip, shared with the opens waiting beside it: authorization, cursors, and whether any job needs reconciling.
    const { node, cursors, hasJobs } = await this.deps.openingReads.read(this.identity, new Date(this.deps.clock.now()));
    const said = {
      agentVersion: hello.agentVersion || null,
      protocolVersion: hello.protocolVersion,
      capabilities,
      engines: knownEnginesAndBackends(hello.engines),
    };
    // Before the node's new agent version is written: an agent rollout counts a node back on the
    // version with READY deployments as updated, so the runtimes a restart lost must already read
    // as loading again by then. (Only a node that can serve deployments has any to reconcile.)
    if (capabilities.includes("deployment.load.v1")) await this.deps.deployments?.held(node.id, hello.heldDeployments);
    if (this.closed) return;
    // A reconnecting agent usually says what it said last time: no write then (reconnect storms).
    const changed = !sameHello(node, said);
    if (changed) await prisma.node.update({ where: { id: node.id }, data: said });
    if (this.closed) return;
    this.deps.heartbeats.record(node.id, this.deps.clock.now());
    this.embeddingEngines = knownEngines(hello.embeddingEngines);
    this.phase = "open";
    // Sessions attached before shutdown are ended by it (server/start/sessions.ts); this one came too late.
    if (this.deps.shutdown.aborted) return this.close(shuttingDown());
    this.deps.sessions.attach(this);
    this.deps.metrics?.opened();
    // At info when the node said something new (first contact, another agent version or
    // capability set); a reconnect that changes nothing is debug: at info those lines cost a
    // measurable share of each open in a storm (bench/heartbeats.ts, replica beside replica), and
    // liveness moves are logged and audited on their own.
    this.caller.log[changed ? "info" : "debug"](
      { nodeId: node.id, agentVersion: hello.agentVersion, capabilities, ignoredCapabilities: ignored },
      "session opened",
    );
    this.sink.send(
      create(SessionResponseSchema, {
        message: {
          case: "welcome",
          value: create(WelcomeSchema, {
            nodeId: node.id,
            serverVersion,
            config: this.deps.agentConfig,
            instructions: pendingInstructions(node),
            streamSequences: cursors,
            ignoredCapabilities: ignored,
          }),
        },
      }),
    );
    // Nothing to reconcile without jobs either side. (A job created between the read above and
    // the attach found no session to push to: the leasing sweep delivers it within one interval.)
    if (hasJobs || hello.runningJobIds.length > 0)
      await this.deps.jobs.sessionOpened(node.id, hello.runningJobIds, this.caller.correlationId);
    this.deps.upgrades?.sessionOpened(node.id, hello.lastUpdate);
  }
}

/** Session for Connect's handler interface (Connect and gRPC-Web protocols): the same object, fed by an async iterable. */
export async function* connectSession(
  deps: SessionDeps,
  identity: NodeIdentity,
  requests: AsyncIterable<SessionRequest>,
  caller: Caller,
): AsyncGenerator<SessionResponse> {
  const outbox = new AsyncQueue<SessionResponse>();
  const session = new AgentSession(deps, identity, caller, {
    send: (m) => outbox.push(m),
    end: (err) => (err === undefined ? outbox.end() : outbox.fail(err)),
  });
  void (async () => {
    for await (const message of requests) session.receive(message);
    session.endInput();
  })().catch((err: unknown) => session.close(err));
  try {
    yield* outbox;
  } finally {
    session.close(new ConnectError("stream closed", Code.Canceled));
  }
}
