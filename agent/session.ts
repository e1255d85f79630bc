// The agent's main loop: keep one Session open, say Hello, then heartbeat, report inventory and
// telemetry at the cadence the server sets, follow instructions, and reconnect after any failure
// with exponential backoff and jitter, always on the identity persisted in the state file.
import { Code, ConnectError } from "@connectrpc/connect";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { durationMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { Logger } from "pino";
import {
  SessionRequestSchema,
  type AgentConfig,
  type Instruction,
  type Reply,
  type SessionRequest,
} from "../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { JobCancel } from "../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { JobLease } from "../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { AsyncQueue } from "../common/queue.js";
import { codeName } from "../common/codes.js";
import { collectInventory, inventoryFingerprint } from "./collectors/inventory.js";
import { collectTelemetry } from "./collectors/telemetry.js";
import { generateNodeKeyAndCsr } from "./pki/keys.js";
import { readState, StateStore, StateError, type AgentState } from "./state.js";
import { nodeConnection, type NodeConnection } from "./transport.js";
import { agentVersion, protocolVersion } from "./version.js";
import { backoffDelay, renewalDue, retryAfterDelay } from "./rules.js";
import { validityReader, type Validity } from "./pki/validity.js";
import { checkIssued } from "./enroll.js";
import { systemClock, type Clock } from "../common/clock.js";
import { onAbort } from "../common/abort.js";
import { CredentialRefusals, refusalAdvice } from "./credential-refusal.js";
import type { SessionDeployments } from "./deployments/session-hook.js";
import type { SessionLoopMetrics } from "./metrics.js";
import { VersionRefusals, versionRefusalDelay, versionRefusalOf } from "./version-refusal.js";
import { repeat } from "./cadence.js";

type SessionMessage = NonNullable<MessageInitShape<typeof SessionRequestSchema>["message"]>;
export type ReplyResult = Reply["result"];

/**
 * The longest reconnect delay (full jitter under it). It bounds how long a fleet takes to come
 * back after an outage of any length: the last agent retries at most this long after the control
 * plane is back (bench/heartbeats.ts RESTARTS). Attempts against a down control plane cost it
 * nothing, and a control plane that is up but busy says when to retry (retry-after), which this
 * does not shorten.
 */
const defaultBackoffMaxMs = 10_000;

/** How job handling plugs into the session (see ./jobs). */
export interface SessionJobs {
  capabilities(): string[];
  /** The runtime engines the agent runs, when it runs any. */
  engines?(): string[];
  runningJobIds(): string[];
  onLease(lease: JobLease, link: SessionLink): void;
  onCancel(cancel: JobCancel): void;
}

/** Sends one message on the open session and resolves with the server's reply. */
export interface SessionLink {
  send(message: SessionMessage): Promise<ReplyResult>;
}

/** What the session reports besides heartbeats (the agent's collectors by default). */
export interface Reporters {
  inventory(): ReturnType<typeof collectInventory>;
  telemetry(): ReturnType<typeof collectTelemetry>;
}

/** Hears how sessions go (the fleet benchmark counts with it); every hook is optional. */
export interface SessionObserver {
  /** Welcome arrived: the session is open. */
  established?(): void;
  /** A session ended: `error` undefined for a clean end; `opened` whether Welcome had arrived. */
  ended?(error: ConnectError | undefined, opened: boolean): void;
  /** A heartbeat's answer arrived after `latencyMs` (refused: a ReplyError). */
  heartbeat?(latencyMs: number, refused: boolean): void;
}

export interface RunOptions {
  statePath: string;
  log: Logger;
  signal: AbortSignal;
  jobs?: SessionJobs;
  deployments?: SessionDeployments;
  /**
   * The agent's time for observed_at, renewal and inventory cadence (default: the system clock;
   * skew drills and tests pass another). Timers that pace the session stay on real time.
   */
  clock?: Clock;
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  /**
   * How long to wait for Welcome, and for the answer to each heartbeat, before giving up on the
   * session and reconnecting (default 30 s). Heartbeats need no I/O on the server, so a missing
   * answer means a hung server or a stream that is dead in a way HTTP/2 pings cannot see.
   */
  replyTimeoutMs?: number;
  metrics?: SessionLoopMetrics | undefined;
  /** Opens the connection for one session (default: ./transport.ts, what `agent run` uses). */
  connect?: (state: AgentState) => NodeConnection;
  /** Inventory and telemetry sources; null sends heartbeats only (the fleet benchmark). */
  reporters?: Reporters | null;
  observer?: SessionObserver;
}

const agentReporters: Reporters = { inventory: () => collectInventory(), telemetry: () => collectTelemetry() };

/** Thrown out of a session to reconnect at once (after renewal), not after a backoff. */
class Reconnect extends Error {}

const defaults = { heartbeatMs: 10_000, telemetryMs: 15_000, inventoryMs: 300_000, renewFraction: 1 / 3 };

export async function runAgent(opts: RunOptions): Promise<void> {
  const { log, signal } = opts;
  let attempt = 0;
  const refusals = new CredentialRefusals();
  const versionRefusals = new VersionRefusals();
  const validity = validityReader();
  while (!signal.aborted) {
    let hinted: number | undefined;
    // Re-read each time: `agent enroll --force` may have replaced the identity meanwhile.
    const state = await readState(opts.statePath);
    if (state === undefined) throw new StateError(`no agent state at ${opts.statePath}: run "agent enroll" first`);
    const store = new StateStore(opts.statePath, state);
    const opened = { value: false };
    // A Welcome proves the credential and the version are accepted: a later refusal is news again.
    // (runSession only ever ends by throwing, so this cannot wait for it to return.)
    const established = () => {
      opened.value = true;
      refusals.accepted();
      versionRefusals.accepted();
    };
    try {
      await runSession(store, opts, established, validity);
      opts.observer?.ended?.(undefined, opened.value);
      attempt = 0;
      if (!signal.aborted) opts.metrics?.reconnecting("ended");
    } catch (err) {
      if (err instanceof Reconnect) {
        opts.observer?.ended?.(undefined, opened.value);
        attempt = 0;
        opts.metrics?.reconnecting("renewed");
        continue;
      }
      if (signal.aborted) break;
      const ce = ConnectError.from(err);
      opts.metrics?.reconnecting(ce.code);
      opts.observer?.ended?.(ce, opened.value);
      const tooOld = versionRefusalOf(err);
      if (tooOld !== undefined) {
        // Refused for its version: only an upgrade helps, so no fast retries and no log flood.
        if (versionRefusals.due((opts.clock ?? systemClock).now())) {
          log.error(
            { nodeId: state.nodeId, agentVersion, code: codeName(ce.code), reason: tooOld },
            `the control plane refused this agent: ${tooOld}`,
          );
        }
        await systemClock.sleep(versionRefusalDelay(opts.backoffMaxMs ?? 30_000), signal);
        continue;
      }
      // Status, method and path only: never a body or credential.
      log.warn(
        { code: codeName(ce.code), method: "Session", path: "/modelforge.agent.v1.AgentService/Session", reason: ce.rawMessage },
        "session failed",
      );
      const refusal = refusals.failed(err, (opts.clock ?? systemClock).now());
      if (refusal !== undefined) log.error({ nodeId: state.nodeId, reason: refusal.reason }, refusalAdvice(refusal, state.nodeId));
      // A server starting up answers, and says when to come back: no exponential growth for that.
      hinted =
        ce.code === Code.Unavailable
          ? retryAfterDelay(ce.metadata.get("retry-after"), opts.backoffMaxMs ?? defaultBackoffMaxMs)
          : undefined;
      // A session that had opened ended under us (a server restart): the whole fleet lost it at
      // once, so start over from the jittered base rather than from where the last outage left off.
      if (opened.value) attempt = 0;
    }
    if (hinted !== undefined) attempt = 0;
    const delay = hinted ?? backoffDelay(attempt++, opts.backoffBaseMs ?? 500, opts.backoffMaxMs ?? defaultBackoffMaxMs);
    await systemClock.sleep(delay, signal);
  }
}

/**
 * One session, from connecting to its end. Every wait in it has a deadline: Welcome (which covers
 * connecting and the TLS handshake: a server that accepts TCP and then says nothing, or a
 * half-open connection, is given up on), every heartbeat's answer, and credential renewal. It
 * throws why it ended, and always closes its connection.
 */
async function runSession(
  store: StateStore,
  opts: RunOptions,
  established: () => void,
  validity: (certPem: string) => Validity,
): Promise<void> {
  const { log } = opts;
  const clock = opts.clock ?? systemClock;
  const now = () => clock.now();
  const reporters = opts.reporters === undefined ? agentReporters : opts.reporters;
  const abort = new AbortController();
  // A stop may have come while the loop read the state file: the session then ends at once.
  const forgetStop = onAbort(opts.signal, () => abort.abort());
  const replyTimeoutMs = opts.replyTimeoutMs ?? 30_000;
  // Ends the session when `what` has not arrived in time; the caller clears it when it does.
  const deadline = (what: string) =>
    setTimeout(
      () => abort.abort(new ConnectError(`no ${what} from the server within ${replyTimeoutMs} ms`, Code.DeadlineExceeded)),
      replyTimeoutMs,
    );
  // Armed before anything can wait: connecting, the handshake and Hello all count against it.
  const welcomeTimer = deadline("Welcome");
  const cadences: (() => void)[] = [];
  let connection: NodeConnection | undefined;
  const outbound = new AsyncQueue<SessionRequest>();
  const pending = new Map<bigint, { resolve(r: ReplyResult): void; reject(e: unknown): void }>();
  let nextId = 0n;
  const link: SessionLink = {
    send(message) {
      const messageId = ++nextId;
      return new Promise<ReplyResult>((resolve, reject) => {
        pending.set(messageId, { resolve, reject });
        if (!outbound.push(create(SessionRequestSchema, { messageId, message }))) {
          pending.delete(messageId);
          reject(new ConnectError("session closed", Code.Unavailable));
        }
      });
    },
  };
  let config: AgentConfig | undefined;
  let lastInventory = "";
  let lastInventoryAt = 0;
  let renewing: Promise<void> | undefined;

  // Publishes one message and logs a refusal by status and method; never the body.
  const publish = async (method: string, message: SessionMessage) => {
    try {
      const result = await link.send(message);
      if (result.case === "error") {
        log.warn(
          { code: result.value.code, method, path: `/modelforge.agent.v1.AgentService/${method}`, reason: result.value.message },
          "publication refused",
        );
        return undefined;
      }
      return result;
    } catch (err) {
      if (!abort.signal.aborted) log.warn({ code: codeName(ConnectError.from(err).code), method }, "publication failed");
      return undefined;
    }
  };

  const sendInventory = async (r: Reporters, force: boolean) => {
    const inv = await r.inventory();
    const fp = inventoryFingerprint(inv);
    const due = now() - lastInventoryAt >= ms(config?.inventoryInterval, defaults.inventoryMs);
    if (!force && !due && fp === lastInventory) return;
    const sequence = await store.nextSequence("inventory");
    const r2 = await publish("PutInventory", {
      case: "inventory",
      value: { report: { sequence, observedAt: timestampFromMs(now()), ...inv } },
    });
    if (r2 !== undefined) {
      lastInventory = fp;
      lastInventoryAt = now();
    }
  };
  const sendTelemetry = async (r: Reporters) => {
    const telemetry = await r.telemetry();
    const sequence = await store.nextSequence("telemetry");
    await publish("PutTelemetry", { case: "telemetry", value: { report: { sequence, observedAt: timestampFromMs(now()), telemetry } } });
  };
  const sendHeartbeat = async () => {
    const timer = deadline("heartbeat answer");
    const sentAt = performance.now();
    try {
      const result = await link.send({ case: "heartbeat", value: { agentVersion, sentAt: timestampFromMs(now()) } });
      opts.observer?.heartbeat?.(performance.now() - sentAt, result.case === "error");
      if (result.case === "error") {
        log.warn({ code: result.value.code, method: "Heartbeat", reason: result.value.message }, "publication refused");
        return undefined;
      }
      return result;
    } catch (err) {
      if (!abort.signal.aborted) log.warn({ code: codeName(ConnectError.from(err).code), method: "Heartbeat" }, "publication failed");
      return undefined;
    } finally {
      clearTimeout(timer);
    }
  };

  const renew = (reason: string) =>
    (renewing ??= (async () => {
      log.info({ reason }, "renewing credential");
      const { keyPem, csrPem } = generateNodeKeyAndCsr();
      // On a connection of its own, outliving the session: the server revokes the old credential
      // as it issues the new one, which ends this session, and the answer must still arrive.
      const own = (opts.connect ?? nodeConnection)(store.current);
      const res = await own.renewCredential({ csrPem }, { signal: opts.signal, timeoutMs: replyTimeoutMs }).finally(() => own.close());
      checkIssued(res.certificatePem, keyPem, store.current.caPem, store.current.nodeId);
      await store.update({ keyPem, certPem: res.certificatePem });
      log.info("credential renewed; reconnecting with the new certificate");
      abort.abort(new Reconnect("renewed"));
    })().catch((err: unknown) => {
      renewing = undefined;
      log.warn({ code: codeName(ConnectError.from(err).code), method: "RenewCredential" }, "renewal failed");
    }));
  const checkRenewal = () => {
    const { from, to } = validity(store.current.certPem);
    const fraction = config?.renewRemainingFraction || defaults.renewFraction;
    if (renewalDue(from, to, now(), fraction)) void renew("certificate nearing expiry");
  };
  const follow = (instructions: Instruction[]) => {
    for (const i of instructions) if (i.kind.case === "renewCredential") void renew(i.kind.value.reason);
  };
  const every = (intervalMs: number, task: () => Promise<unknown>, overlap = true) => {
    cadences.push(
      repeat(intervalMs, () => task().catch((err: unknown) => log.warn({ error: (err as Error).message }, "periodic task failed")), {
        overlap,
      }),
    );
  };

  outbound.push(
    create(SessionRequestSchema, {
      messageId: ++nextId,
      message: {
        case: "hello",
        value: {
          protocolVersion,
          agentVersion,
          capabilities: opts.jobs?.capabilities() ?? [],
          engines: opts.jobs?.engines?.() ?? [],
          runningJobIds: opts.jobs?.runningJobIds() ?? [],
          heldDeployments: opts.deployments?.held() ?? [],
        },
      },
    }),
  );
  try {
    connection = (opts.connect ?? nodeConnection)(store.current);
    for await (const res of connection.session(outbound, { signal: abort.signal })) {
      const m = res.message;
      switch (m.case) {
        case "welcome": {
          clearTimeout(welcomeTimer);
          established();
          opts.observer?.established?.();
          config = m.value.config;
          log.info({ nodeId: m.value.nodeId, serverVersion: m.value.serverVersion }, "session established");
          await catchUpSequences(store, m.value.streamSequences);
          follow(m.value.instructions);
          checkRenewal();
          every(ms(config?.heartbeatInterval, defaults.heartbeatMs), async () => {
            const r = await sendHeartbeat();
            if (r?.case === "heartbeat") follow(r.value.instructions);
            checkRenewal();
          });
          void sendHeartbeat();
          if (reporters !== null) {
            every(
              ms(config?.telemetryInterval, defaults.telemetryMs),
              async () => {
                await sendTelemetry(reporters);
                await sendInventory(reporters, false);
              },
              false, // a collection slower than the interval is not stacked on
            );
            void sendInventory(reporters, true)
              .then(() => sendTelemetry(reporters))
              .catch((err: unknown) => log.warn({ error: (err as Error).message }, "first report failed"));
          }
          break;
        }
        case "reply": {
          const p = pending.get(m.value.messageId);
          pending.delete(m.value.messageId);
          p?.resolve(m.value.result);
          break;
        }
        case "instruction":
          follow([m.value]);
          break;
        case "config":
          config = m.value;
          break;
        case "lease":
          if (opts.jobs) opts.jobs.onLease(m.value, link);
          else log.warn({ jobId: m.value.jobId }, "lease received but this agent runs no jobs");
          break;
        case "cancel":
          opts.jobs?.onCancel(m.value);
          break;
        default:
          opts.deployments?.onMessage(m, link);
      }
    }
  } catch (err) {
    // Reconnect after renewal, or the deadline that ended the session: they say why, not "canceled".
    if (abort.signal.reason instanceof Reconnect || abort.signal.reason instanceof ConnectError) throw abort.signal.reason;
    throw err;
  } finally {
    clearTimeout(welcomeTimer);
    for (const stop of cadences) stop();
    outbound.end();
    for (const p of pending.values()) p.reject(new ConnectError("session closed", Code.Unavailable));
    forgetStop();
    abort.abort();
    connection?.close();
    // A renewal under way decides which certificate the next session presents (bounded by its deadline).
    await renewing;
  }
  if (abort.signal.reason instanceof Reconnect || abort.signal.reason instanceof ConnectError) throw abort.signal.reason;
}

/** After a restore from an older copy, continue after what the server has already accepted. */
async function catchUpSequences(store: StateStore, server: { [stream: string]: bigint }): Promise<void> {
  const s = store.current.sequences;
  const inventory = server.inventory ?? 0n;
  const telemetry = server.telemetry ?? 0n;
  if (inventory > BigInt(s.inventory) || telemetry > BigInt(s.telemetry)) {
    await store.update({
      sequences: {
        inventory: (inventory > BigInt(s.inventory) ? inventory : BigInt(s.inventory)).toString(),
        telemetry: (telemetry > BigInt(s.telemetry) ? telemetry : BigInt(s.telemetry)).toString(),
      },
    });
  }
}

function ms(d: Parameters<typeof durationMs>[0] | undefined, fallback: number): number {
  const v = d === undefined ? 0 : durationMs(d);
  return v > 0 ? v : fallback;
}
