// The invoke relay: one service client's request goes to the node serving the deployment as an
// InvokeStart on that node's Session, and the node's InvokeAnswer messages come back as the answer
// (whole, or chunk by chunk). No job row is written per request: a durable row would put a
// database write (and its fsync) on every invoke, which capped throughput far below the target
// (see bench/invoke.ts); a request that cannot finish is simply failed back to its caller, who
// retries. Bounded: requests in flight per deployment, the deadline (the caller's and the
// deployment's), and the caller's cancellation, which is passed on to the node. Nothing on the way
// needs the database while it is away: routes read before are answered from the routing cache for
// as long as the outage lasts (a route is no credential, and a node refuses what it no longer holds).
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  SessionResponseSchema,
  type InvokeAnswer,
  type SessionRequest,
  type SessionResponse,
} from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { InvokeApi } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import type { Clock } from "../../common/clock.js";
import type { AsyncQueue } from "../../common/queue.js";
import { onAbort } from "../../common/abort.js";
import { Cancel } from "../../common/cancel.js";
import { LookupCache } from "../../common/lookup-cache.js";
import { codeName } from "../../common/codes.js";
import { staleWhileDatabaseAway, type OutageWatch } from "../db/availability.js";
import type { InvokePush, LiveSession, NodeSessions } from "../node-sessions.js";
import type { Logger } from "../observability/logger.js";
import type { ServicePrincipal } from "../identity/service-keys.js";
import type { DeploymentRoutes, DeploymentTarget } from "./routes.js";
import {
  checkEmbeddings,
  checkPayload,
  InFlight,
  invokeTimeoutMs,
  nodeRefusal,
  payloadForNode,
  pickReplica,
  refusedBeforeStart,
  replicaKey,
  routeInvoke,
  unreachable,
} from "./rules.js";
import { InvokeMeter } from "./meter.js";
import { CallerStalled, callerStalledOutcome, outboxOf } from "./outbox.js";
import type { UsageLedger } from "../usage/ledger.js";
import type { ServingMetrics } from "../observability/metrics.js";
import type { Charge, KeyLimiter } from "../usage/limits.js";
import type { LimitedRequest } from "../usage/limit-rules.js";
import type { InvokeCounts } from "./counts.js";
import type { LogWatches } from "./logs.js";
import type { SessionHolder } from "../cluster/replicas.js";
import type { Drain } from "./drain.js";
import type { AbandonReason } from "../context.js";
import { mustWait, type ColdStarts } from "./cold-start.js";
import type { ServingActivity } from "./activity.js";
import type { PrefixRouting, PromptKey } from "./prefix-routing.js";

export interface InvokeCall {
  /** By id or name. */
  deployment: string;
  contentType: string;
  payload: Uint8Array;
  /**
   * The payload as a front door already read it with parseJsonObject (../invoke/json-body.ts),
   * so that it is not parsed twice; its fields are still checked here.
   */
  body?: Record<string, unknown>;
  /** The caller's timeout; undefined for the default. */
  timeoutMs: number | undefined;
  api: InvokeApi;
  stream: boolean;
  /** The call's correlation id, passed to the node for tracing. */
  requestId: string;
  /** Aborted when the caller goes away. */
  signal: AbortSignal | Cancel;
  /** The caller's authorization header, passed on when the call is forwarded to another replica. */
  credential?: string;
  /** The replica that forwarded this call here; such a call is served here or refused, never forwarded again. */
  forwardedFrom?: string;
  /**
   * Ends the caller's transport stream at once (an HTTP/2 reset; on HTTP/1.1 the connection
   * closes): for a caller that stopped reading, whose transport would otherwise wait on it forever.
   */
  abandon?: (reason: AbandonReason) => void;
  /** Called every few seconds while the request waits for a replica to load (a stream sends a keep-alive). */
  whileHeld?: () => void;
}

/** One piece of an answer: the whole body for a unary call, one chunk for a stream. */
export interface AnswerPiece {
  readonly payload: Uint8Array;
  /** The JSON object the payload holds, when the relay here read it (a forwarded answer's is not). */
  answer?: Record<string, unknown>;
  contentType: string;
  revision: bigint;
  /** The replica slot that answered. */
  replica: number;
}

/** Reaches the replica holding a node's Session (./forward.ts). */
export interface InvokeForwarder {
  /** The replica to forward to for these candidate nodes, if another live one holds a Session. */
  holderOf(nodeIds: readonly string[]): Promise<SessionHolder | undefined>;
  /** The holder's answer pieces; its typed errors pass through with their codes. */
  forward(holder: SessionHolder, call: InvokeCall): AsyncGenerator<AnswerPiece>;
  close(): void;
}

export interface InvokeRelayDeps {
  sessions: Pick<NodeSessions, "get" | "isConnected">;
  routes: DeploymentRoutes;
  clock: Clock;
  log: Logger;
  counts: InvokeCounts;
  logs: LogWatches;
  /** How long a routing lookup is reused (default 1 s); a routing change drops it at once. */
  routeCacheMs?: number;
  /** Reaches a node whose Session is on another replica; without it such a node is unreachable. */
  forwarder?: InvokeForwarder;
  /** Knows whether the database is lost: routes are then answered from the cache without trying it. */
  outage?: OutageWatch;
  /** Counts each request until it ends; refuses new ones once the replica is stopping (./drain.ts). */
  drain: Drain;
  /** Counts each request's tokens for its service key. */
  usage?: Pick<UsageLedger, "record">;
  /** Prometheus counters per deployment. */
  metrics?: ServingMetrics;
  /** Service keys' limits, checked before a request goes to the node. */
  limits?: Pick<KeyLimiter, "admit">;
  /** Draws in [0, 1) for choosing replicas; Math.random unless a test fixes it. */
  random?: () => number;
  /** The most answer bytes held for a caller that has not read them (default `defaultMaxUnreadBytes`). */
  maxUnreadBytes?: number;
  /** Where requests wait for an autoscaled deployment's replica to load; without it they are refused as not ready. */
  coldStarts?: ColdStarts;
  /** Counts each deployment's requests for the autoscaler. */
  activity?: Pick<ServingActivity, "began">;
  /** Routes a request to the replica that holds its prompt's head; without it, by load alone. */
  prefix?: PrefixRouting;
}

/** What a stream's caller may leave unread before the request ends as client_stalled. */
export const defaultMaxUnreadBytes = 1024 * 1024;
/** How long a caller that is not reading is given to take a failure before its stream is ended. */
const abandonGraceMs = 2_000;

/** A try waiting on its node: each answer is handed to it as the Session reads it. */
interface Pending {
  session: LiveSession;
  answer(answer: InvokeAnswer): void;
  fail(err: unknown): void;
}

/** Takes one answer piece for the caller; throws CallerStalled when the caller is too far behind. */
type Emit = (piece: AnswerPiece) => void;

export class InvokeRelay {
  private nextId = 0n;
  private readonly pending = new Map<bigint, Pending>();
  private readonly inFlight = new InFlight();
  private readonly routeCache: LookupCache<DeploymentTarget | undefined>;
  private readonly random: () => number;
  readonly stopListening: () => void;

  constructor(private readonly deps: InvokeRelayDeps) {
    this.random = deps.random ?? Math.random;
    this.routeCache = new LookupCache(deps.clock, deps.routeCacheMs ?? 1_000, staleWhileDatabaseAway(Infinity, deps.outage));
    // Drain, revision change, unload: the next request sees it, not one a cache period later.
    this.stopListening = deps.routes.onChange((deploymentId) => {
      this.routeCache.deleteWhere((key, target) => target === undefined || target.deploymentId === deploymentId || key === deploymentId);
      // A replica unloaded or restarted: its prompts are forgotten now, not at the next request.
      const prefix = deps.prefix;
      if (prefix?.knows(deploymentId)) {
        deps.routes.find(deploymentId).then(
          (target) => prefix.changed(deploymentId, target),
          () => undefined,
        );
      }
    });
  }

  /** Requests in flight through this control plane on one replica of a deployment. */
  inFlightOf(deploymentId: string, revision: bigint, replica: number): number {
    return this.inFlight.of(replicaKey(deploymentId, revision, replica));
  }

  /**
   * The answer pieces of one relayed request, in order; throws the contract's typed errors. A
   * replica that is stopping refuses it first, forwarded or not, before any byte reaches a node.
   *
   * The request runs apart from its caller's reading: pieces wait in an outbox, and the request's
   * slot, deadline and cancellation never depend on the caller taking them. A caller that leaves
   * more than `maxUnreadBytes` unread has stalled: its request ends (client_stalled) and its
   * transport stream is ended. One still not done past the deadline has its stream ended too.
   */
  async *invoke(principal: ServicePrincipal, call: InvokeCall): AsyncGenerator<AnswerPiece> {
    const release = this.deps.drain.enter();
    const outbox = outboxOf<AnswerPiece>(this.deps.maxUnreadBytes ?? defaultMaxUnreadBytes);
    // Aborted when the caller goes away or stops taking pieces: the request's own cancellation.
    const running = new Cancel();
    const forgetCaller = onAbort(call.signal, () => running.abort(callerWentAway));
    const state: RunState = { deadlineAt: undefined, pumping: true, taken: false, forgetTimer: undefined };
    void this.pump(principal, { ...call, cancel: running }, outbox, state).finally(release);
    try {
      yield* outbox;
    } finally {
      state.taken = true;
      state.forgetTimer?.();
      forgetCaller();
      if (state.pumping) running.abort(callerStopped);
    }
  }

  /** Runs one request to its end, its pieces into the outbox; then ends the caller's stream if the caller is not taking them. */
  private async pump(principal: ServicePrincipal, call: RelayedCall, outbox: AsyncQueue<AnswerPiece>, state: RunState): Promise<void> {
    // Pieces go into the outbox as the node's answers are read, with no wait per piece.
    const emit: Emit = (piece) => {
      if (!outbox.push(piece)) throw new CallerStalled(outbox.untakenWeight);
    };
    let ended: "whole" | "failed" | "stalled" = "whole";
    let failure: unknown;
    try {
      await this.relay(principal, call, state, emit);
    } catch (err) {
      ended = err instanceof CallerStalled ? "stalled" : "failed";
      failure = err;
    }
    // Before the caller can see the end, so that its side does not stop a request already over.
    state.pumping = false;
    // A caller waiting for the next piece has taken the rest and takes the end at once.
    const waiting = outbox.consumerWaiting;
    if (ended === "whole") outbox.end();
    else outbox.fail(failure instanceof CallerStalled ? failure.refusal : failure);
    const abandon = call.abandon;
    if (state.taken || waiting || abandon === undefined) return;
    if (ended === "stalled") return abandon("stalled");
    // A failure is the caller's to take in a moment; a whole answer, until the deadline.
    const deadlineMs = state.deadlineAt === undefined ? 0 : state.deadlineAt - this.deps.clock.now();
    const waitMs = ended === "whole" ? Math.max(abandonGraceMs, deadlineMs) : abandonGraceMs;
    state.forgetTimer = this.deps.clock.after(waitMs, () => {
      if (!state.taken) abandon("deadline");
    });
  }

  private async relay(principal: ServicePrincipal, call: RelayedCall, state: RunState, emit: Emit): Promise<void> {
    // Before routing: bad input is the caller's mistake, refused here and never relayed.
    const checked = checkPayload(call.contentType, call.payload, call.api, call.stream, call.body);
    let target = await this.target(call.deployment);
    // Counted once, where the request arrived (a forwarded one was counted there), and only for a caller allowed to call it.
    const ended =
      target !== undefined && call.forwardedFrom === undefined && principal.deployments.has(target.name)
        ? this.deps.activity?.began(target.deploymentId, this.deps.clock.now())
        : undefined;
    try {
      let charge: Charge | undefined;
      if (this.deps.coldStarts !== undefined && mustWait(target, principal.deployments)) {
        // A held request counts toward its key's limits as it would otherwise: admitted first.
        const held = target;
        charge = await this.admitKey(principal, held, { body: checked.body, bodyBytes: checked.payload.byteLength });
        try {
          target = await this.deps.coldStarts.wait(held, {
            timeoutMs: call.timeoutMs,
            signal: call.cancel.signal,
            whileHeld: call.whileHeld,
          });
        } catch (err) {
          charge?.settle(0);
          const outcome = err instanceof ConnectError ? codeName(err.code) : "internal";
          this.deps.counts.record(held.deploymentId, outcome);
          this.deps.metrics?.refused(held.name, outcome);
          throw err;
        }
        // Routed below by its fresh route: the cached one still says no replica is ready.
        this.routeCache.delete(call.deployment);
      }
      await this.routed(principal, call, state, checked, target, charge, emit);
    } finally {
      ended?.();
    }
  }

  /** A request whose deployment has a route: to a replica here, or forwarded to the replica holding its node's session. */
  private async routed(
    principal: ServicePrincipal,
    call: RelayedCall,
    state: RunState,
    checked: ReturnType<typeof checkPayload>,
    target: DeploymentTarget | undefined,
    admitted: Charge | undefined,
    emit: Emit,
  ): Promise<void> {
    let charge = admitted;
    let route: ReturnType<typeof routeInvoke>;
    try {
      route = routeInvoke(target, principal.deployments, call.deployment, (n) => this.deps.sessions.isConnected(n));
    } catch (err) {
      charge?.settle(0);
      throw err;
    }
    const deployment = target!;
    state.deadlineAt = this.deps.clock.now() + invokeTimeoutMs(call.timeoutMs, deployment.invokeTimeoutMs);
    if ("elsewhere" in route) {
      // The replica it goes to admits it against the key's limits; one admitted here while held is let go.
      charge?.settle(0);
      await passOn(this.elsewhere(deployment.name, route.elsewhere, call), emit);
      return;
    }
    if (checked.api === InvokeApi.EMBEDDINGS) {
      const first = route.here[0]!;
      try {
        checkEmbeddings(deployment.name, first, this.deps.sessions.get(first.nodeId)?.embeddingEngines ?? []);
      } catch (err) {
        charge?.settle(0);
        throw err;
      }
    }
    charge ??= await this.admitKey(principal, deployment, { body: checked.body, bodyBytes: checked.payload.byteLength });
    const meter = new InvokeMeter(
      this.deps,
      { keyId: principal.keyId, deploymentId: deployment.deploymentId, deployment: deployment.name, stream: call.stream },
      checked.body,
    );
    const request: Attempted = {
      call,
      checked,
      deployment,
      meter,
      deadlineAt: state.deadlineAt,
      finished: false,
    };
    let outcome = "ok";
    // One replica here: nothing to choose between, so no prompt is hashed.
    const prompt = route.here.length > 1 ? this.deps.prefix?.promptOf(checked, principal.keyId) : undefined;
    try {
      const tried = new Set<string>();
      for (;;) {
        const replica = this.choose(deployment, route.here, tried, prompt);
        tried.add(replicaKey(deployment.deploymentId, replica.revision, replica.replica));
        try {
          await this.attempt(request, replica, emit);
          return;
        } catch (err) {
          // Refused before any byte reached the runtime: once, another replica takes it.
          const again =
            err instanceof NotStarted &&
            tried.size === 1 &&
            route.here.some((r) => !tried.has(replicaKey(deployment.deploymentId, r.revision, r.replica)));
          if (again) {
            this.deps.log.debug(
              { deploymentId: deployment.deploymentId, nodeId: replica.nodeId, requestId: call.requestId },
              "invoke moved to another replica",
            );
            continue;
          }
          throw err instanceof NotStarted ? err.refusal : err;
        }
      }
    } catch (err) {
      outcome = err instanceof CallerStalled ? callerStalledOutcome : err instanceof ConnectError ? codeName(err.code) : "internal";
      throw err;
    } finally {
      // A consumer that stopped early (its caller went away mid-stream) ended the node's work too.
      if (!request.finished && outcome === "ok") outcome = "canceled";
      this.deps.counts.record(deployment.deploymentId, outcome);
      const used = meter.end(outcome);
      charge?.settle(used);
    }
  }

  /**
   * The replica a request goes to among those below max_in_flight and not yet tried: by its prompt
   * when prefix routing is on (./prefix-routing.ts), else by power of two choices; else
   * resource_exhausted.
   */
  private choose(
    deployment: DeploymentTarget,
    candidates: DeploymentTarget["ready"],
    tried: ReadonlySet<string>,
    prompt: PromptKey | undefined,
  ): DeploymentTarget["ready"][number] {
    const key = (r: DeploymentTarget["ready"][number]) => replicaKey(deployment.deploymentId, r.revision, r.replica);
    const load = (r: DeploymentTarget["ready"][number]) => ({
      inFlight: this.inFlight.of(key(r)),
      queued: this.deps.sessions.get(r.nodeId)?.queuedAt(deployment.deploymentId, r.revision, r.replica) ?? 0,
    });
    const open = candidates.filter((r) => !tried.has(key(r)));
    const replica =
      prompt !== undefined && this.deps.prefix !== undefined
        ? this.deps.prefix.choose(deployment, open, load, this.random, prompt)
        : pickReplica(open, load, deployment.maxInFlight, this.random);
    if (replica !== undefined) return replica;
    if (tried.size > 0) throw unreachable(deployment.name, "no other replica could take the request");
    this.deps.counts.record(deployment.deploymentId, "resource_exhausted");
    this.deps.metrics?.refused(deployment.name, "resource_exhausted");
    throw new ConnectError(
      `deployment ${deployment.name} already has ${deployment.maxInFlight} requests in flight on each replica: retry later`,
      Code.ResourceExhausted,
      new Headers({ "retry-after": "1" }),
    );
  }

  /**
   * One try on one replica: the request goes to the node as an InvokeStart on its Session and its
   * answers come back, each handed to `emit` as the Session reads it. Rejects with NotStarted when
   * the node refused it before the runtime began it.
   */
  private attempt(request: Attempted, replica: DeploymentTarget["ready"][number], emit: Emit): Promise<void> {
    const { call, deployment, meter } = request;
    const key = replicaKey(deployment.deploymentId, replica.revision, replica.replica);
    const session = this.deps.sessions.get(replica.nodeId);
    const invokeId = ++this.nextId;
    let finished = false;
    let began = false;
    const cancelOnNode = () => {
      if (!finished) session?.send(cancelMessage(invokeId));
    };
    const timeoutMs = Math.max(1, request.deadlineAt - this.deps.clock.now());
    return new Promise<void>((resolve, reject) => {
      let settled = false;
      let stopDeadline = noop;
      let forgetCaller = noop;
      /** Ends the try once: what it holds is let go, and the node's work ends unless it finished. */
      const settle = (failure?: unknown) => {
        if (settled) return;
        settled = true;
        if (!finished) cancelOnNode();
        finished = true;
        stopDeadline();
        forgetCaller();
        this.pending.delete(invokeId);
        this.inFlight.release(key);
        if (failure === undefined) resolve();
        // The session closed under the request before any answer: moved once to another replica,
        // like a refusal before the runtime started.
        else if (failure instanceof SessionEnded) reject(began ? failure.refusal : new NotStarted(failure.refusal));
        else reject(failure);
      };
      this.inFlight.acquire(key, 0);
      // The deadline and the caller's going away end the wait here and the runtime's work there.
      stopDeadline = this.deps.clock.after(timeoutMs, () =>
        settle(new ConnectError(`deployment ${deployment.name} did not answer within ${timeoutMs} ms`, Code.DeadlineExceeded)),
      );
      forgetCaller = call.cancel.onAbort(() => settle(new ConnectError("the caller went away", Code.Canceled)));
      // A caller already gone settled the try as the listener was added, before it could be forgotten.
      if (settled) return forgetCaller();
      if (session === undefined) return settle(new NotStarted(unreachable(deployment.name, "its session closed")));
      // Each answer is taken as the Session reads it, with no queue or wait between.
      const answer = (a: InvokeAnswer) => {
        if (settled) return;
        try {
          if (a.error !== undefined) {
            const refusal = nodeRefusal(a.error.code, a.error.message);
            return settle(!began && refusedBeforeStart(refusal.code) ? new NotStarted(refusal) : refusal);
          }
          began = true;
          const passed = meter.pass(a.payload);
          if (passed !== undefined) {
            emit({
              get payload() {
                return passed.payload;
              },
              ...(passed.answer !== undefined ? { answer: passed.answer } : {}),
              contentType: a.contentType || "application/json",
              revision: a.revision || replica.revision,
              replica: replica.replica,
            });
          }
          if (a.done) {
            finished = true;
            request.finished = true;
            settle();
          }
        } catch (err) {
          settle(err);
        }
      };
      this.pending.set(invokeId, { session, answer, fail: settle });
      if (!session.sendInvoke(invokePush(invokeId, request, replica, timeoutMs))) {
        settle(new NotStarted(new ConnectError(`the node serving deployment ${deployment.name} is not reachable`, Code.Unavailable)));
      }
    });
  }

  /** Admits a request within its key's limits (shared by every replica); else resource_exhausted, counted as refused. */
  private async admitKey(principal: ServicePrincipal, deployment: DeploymentTarget, request: LimitedRequest): Promise<Charge | undefined> {
    try {
      return await this.deps.limits?.admit(principal, request);
    } catch (err) {
      if (err instanceof ConnectError && err.code === Code.ResourceExhausted) {
        this.deps.counts.record(deployment.deploymentId, "resource_exhausted");
        this.deps.metrics?.refused(deployment.name, "resource_exhausted");
      }
      throw err;
    }
  }

  /** A node whose Session is not here: forwarded to the replica holding it, once. */
  private async *elsewhere(name: string, candidates: DeploymentTarget["ready"], call: RelayedCall): AsyncGenerator<AnswerPiece> {
    const forwarder = this.deps.forwarder;
    // One control plane (no forwarder): no other holds the session; the node is not connected.
    if (forwarder === undefined) throw unreachable(name, "its node is not connected");
    if (call.forwardedFrom !== undefined) throw unreachable(name, "the replica that forwarded the call expected its session here");
    const holder = await forwarder.holderOf(candidates.map((i) => i.nodeId));
    if (holder === undefined) throw unreachable(name, "no replica holds its session");
    const { cancel, ...forwarded } = call;
    yield* forwarder.forward(holder, { ...forwarded, signal: cancel.signal });
  }

  /** A relay message from an agent (SessionRequest invoke_answer or log_lines): no I/O. */
  fromAgent(session: LiveSession, message: SessionRequest): void {
    const m = message.message;
    if (m.case === "invokeAnswer") {
      const p = this.pending.get(m.value.invokeId);
      // Only the session the request went to may answer it; a late answer finds nothing.
      if (p === undefined || p.session !== session) return;
      p.answer(m.value);
    } else if (m.case === "logLines") {
      this.deps.logs.fromAgent(session, m.value);
    }
  }

  /** A node's Session ended on this replica: its requests fail as unavailable (moved elsewhere when nothing came back yet), its watches end. */
  sessionClosed(session: LiveSession): void {
    for (const p of this.pending.values()) {
      if (p.session === session) p.fail(new SessionEnded());
    }
    this.deps.logs.sessionClosed(session);
  }

  private target(idOrName: string): Promise<DeploymentTarget | undefined> {
    return this.routeCache.get(idOrName, () => this.deps.routes.find(idOrName));
  }
}

/** One request's run as its caller's side sees it. */
interface RunState {
  /** The request's deadline on the relay's clock, once its deployment is known. */
  deadlineAt: number | undefined;
  /** Until the request has ended. */
  pumping: boolean;
  /** The caller's side has ended: it took the whole answer, or stopped. */
  taken: boolean;
  /** Cancels the timer that ends a caller's stream left waiting. */
  forgetTimer: (() => void) | undefined;
}

/** Why a request ends when its caller goes away: a cancel, which a forwarded call passes on as one. */
const callerWentAway = new ConnectError("the caller went away", Code.Canceled);
/** Why a request ends when its caller's side ends before the answer did. */
const callerStopped = new ConnectError("the caller stopped reading the answer", Code.Canceled);

/** A call as the relay runs it: the caller's signal replaced by the request's own cancellation. */
interface RelayedCall extends Omit<InvokeCall, "signal"> {
  /** Aborted when the caller goes away or stops taking the answer. */
  cancel: Cancel;
}

/** A request across its tries: what was checked, its meter and deadline, and whether it ended whole. */
interface Attempted {
  call: RelayedCall;
  checked: ReturnType<typeof checkPayload>;
  deployment: DeploymentTarget;
  meter: InvokeMeter;
  /** The caller's deadline, on the relay's clock. */
  deadlineAt: number;
  finished: boolean;
}

/** The serving node's session ended while a request waited on it. */
class SessionEnded extends Error {
  readonly refusal = new ConnectError("the node's session ended during the request", Code.Unavailable);
}

/** The node refused before the runtime began the request: another replica may take it. */
class NotStarted extends Error {
  constructor(readonly refusal: ConnectError) {
    super(refusal.message);
  }
}

const noop = (): void => undefined;

/** Passes a forwarded call's pieces on; a stall is thrown into the forward, which cancels it at the holder. */
async function passOn(pieces: AsyncGenerator<AnswerPiece>, emit: Emit): Promise<void> {
  for (let next = await pieces.next(); next.done !== true; next = await pieces.next()) {
    try {
      emit(next.value);
    } catch (err) {
      await pieces.throw(err);
      throw err;
    }
  }
}

/** The InvokeStart of one try. */
function invokePush(
  invokeId: bigint,
  request: Attempted,
  { revision, replica }: DeploymentTarget["ready"][number],
  timeoutMs: number,
): InvokePush {
  const { call, checked, deployment } = request;
  return {
    invokeId,
    deploymentId: deployment.deploymentId,
    requestId: call.requestId,
    contentType: "application/json",
    payload: payloadForNode(checked.body, checked.payload, call.stream),
    timeoutMs,
    revision,
    replica,
    api: checked.api,
    stream: call.stream,
  };
}

function cancelMessage(invokeId: bigint): SessionResponse {
  return create(SessionResponseSchema, { message: { case: "invokeCancel", value: { invokeId } } });
}
