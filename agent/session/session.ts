// One session, from connecting to its end: Hello, then Welcome, then heartbeats and reports at the
// cadence the server set, the server's instructions followed and its pushes handed to the jobs and
// deployments. Every wait in it has a deadline: Welcome (which covers connecting and the TLS
// handshake: a server that accepts TCP and then says nothing, or a half-open connection, is given
// up on), every heartbeat's answer, and credential renewal. It throws why it ended, and always
// closes its connection.
import { Code, ConnectError } from "@connectrpc/connect";
import { durationMs } from "@bufbuild/protobuf/wkt";
import type { AgentConfig, SessionResponse, Welcome } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { AgentUpdateReport } from "../../gen/proto/modelforge/agent/v1/agent_update_pb.js";
import { systemClock, type Clock } from "../../common/clock.js";
import { onAbort } from "../../common/abort.js";
import { repeat } from "./cadence.js";
import type { Validity } from "../pki/validity.js";
import type { StateStore } from "../state.js";
import { nodeConnection, type NodeConnection } from "./transport.js";
import { agentVersion, protocolVersion } from "../version.js";
import { sendHeartbeat, type HeartbeatDeps } from "./heartbeat.js";
import { Outbox, publish, type SessionMessage } from "./link.js";
import type { RunOptions } from "./options.js";
import { CredentialRenewal } from "./renewal.js";
import { agentReporters, SessionReports } from "./reporters.js";

/** Thrown out of a session to reconnect at once (after renewal), not after a backoff. */
export class Reconnect extends Error {}

const defaults = { heartbeatMs: 10_000, telemetryMs: 15_000, inventoryMs: 300_000, replyTimeoutMs: 30_000 };

export class AgentSession {
  /** Aborted when the session ends; its reason, when it is ours, says why. */
  private readonly abort = new AbortController();
  private readonly outbox = new Outbox();
  private readonly cadences: (() => void)[] = [];
  private readonly clock: Clock;
  private readonly connect: RunOptions["connect"] & {};
  private readonly replyTimeoutMs: number;
  private readonly renewal: CredentialRenewal;
  private readonly reports: SessionReports | undefined;
  private readonly heartbeat: HeartbeatDeps;
  private config: AgentConfig | undefined;

  /** `established` hears Welcome: the credential and the version were accepted. */
  constructor(
    private readonly store: StateStore,
    private readonly opts: RunOptions,
    private readonly established: () => void,
    validity: (certPem: string) => Validity,
  ) {
    const { log } = opts;
    this.clock = opts.clock ?? systemClock;
    this.connect = opts.connect ?? nodeConnection;
    this.replyTimeoutMs = opts.replyTimeoutMs ?? defaults.replyTimeoutMs;
    const ended = this.abort.signal;
    this.renewal = new CredentialRenewal({
      store,
      log,
      clock: this.clock,
      connect: this.connect,
      signal: opts.signal,
      timeoutMs: this.replyTimeoutMs,
      validity,
      renewed: () => this.abort.abort(new Reconnect("renewed")),
    });
    const reporters = opts.reporters === undefined ? agentReporters : opts.reporters;
    this.reports =
      reporters === null
        ? undefined
        : new SessionReports({
            reporters,
            store,
            clock: this.clock,
            publish: (method, message) => publish(this.outbox, log, ended, method, message),
            inventoryMs: () => ms(this.config?.inventoryInterval, defaults.inventoryMs),
          });
    this.heartbeat = {
      link: this.outbox,
      log,
      clock: this.clock,
      ended,
      deadline: (what) => this.deadline(what),
      observer: opts.observer,
      loads: () => opts.deployments?.loads() ?? [],
    };
  }

  async run(): Promise<void> {
    // Read first, so nothing below waits on it: an unreadable report is simply not sent.
    const lastUpdate = await this.opts.updates?.lastUpdate().catch(() => undefined);
    // A stop may have come while the loop read the state file: the session then ends at once.
    const forgetStop = onAbort(this.opts.signal, () => this.abort.abort());
    // Armed before anything can wait: connecting, the handshake and Hello all count against it.
    const welcomed = this.deadline("Welcome");
    this.outbox.post(this.hello(lastUpdate));
    let connection: NodeConnection | undefined;
    try {
      connection = this.connect(this.store.current);
      for await (const res of connection.session(this.outbox.requests, { signal: this.abort.signal })) {
        if (res.message.case === "welcome") welcomed();
        await this.receive(res.message);
      }
    } catch (err) {
      throw this.why() ?? err;
    } finally {
      welcomed();
      for (const stop of this.cadences) stop();
      this.outbox.close();
      forgetStop();
      this.abort.abort();
      connection?.close();
      // A renewal under way decides which certificate the next session presents (bounded by its deadline).
      await this.renewal.settled();
    }
    const why = this.why();
    if (why !== undefined) throw why;
  }

  /** Reconnect after renewal, or the deadline that ended the session: they say why, not "canceled". */
  private why(): Reconnect | ConnectError | undefined {
    const reason: unknown = this.abort.signal.reason;
    return reason instanceof Reconnect || reason instanceof ConnectError ? reason : undefined;
  }

  /** Ends the session when `what` has not arrived in time; returns what disarms it when it has. */
  private deadline(what: string): () => void {
    const timer = setTimeout(
      () => this.abort.abort(new ConnectError(`no ${what} from the server within ${this.replyTimeoutMs} ms`, Code.DeadlineExceeded)),
      this.replyTimeoutMs,
    );
    return () => clearTimeout(timer);
  }

  private hello(lastUpdate: AgentUpdateReport | undefined): SessionMessage {
    const { jobs, deployments } = this.opts;
    return {
      case: "hello",
      value: {
        protocolVersion,
        agentVersion,
        capabilities: jobs?.capabilities() ?? [],
        engines: jobs?.engines?.() ?? [],
        embeddingEngines: jobs?.embeddingEngines?.() ?? [],
        runningJobIds: jobs?.runningJobIds() ?? [],
        heldDeployments: deployments?.held() ?? [],
        ...(lastUpdate !== undefined ? { lastUpdate } : {}),
      },
    };
  }

  private async receive(m: SessionResponse["message"]): Promise<void> {
    switch (m.case) {
      case "welcome":
        await this.welcome(m.value);
        break;
      case "reply":
        this.outbox.answered(m.value);
        break;
      case "instruction":
        if (m.value.kind.case === "agentUpdate") {
          this.opts.updates?.follow(m.value.kind.value, () => this.abort.abort(new Reconnect("update refused")));
        } else this.renewal.follow([m.value]);
        break;
      case "config":
        this.config = m.value;
        break;
      case "lease":
        if (this.opts.jobs) this.opts.jobs.onLease(m.value, this.outbox);
        else this.opts.log.warn({ jobId: m.value.jobId }, "lease received but this agent runs no jobs");
        break;
      case "cancel":
        this.opts.jobs?.onCancel(m.value);
        break;
      default:
        this.opts.deployments?.onMessage(m, this.outbox);
    }
  }

  private async welcome(welcome: Welcome): Promise<void> {
    const { log } = this.opts;
    this.established();
    this.opts.observer?.established?.();
    this.config = welcome.config;
    log.info({ nodeId: welcome.nodeId, serverVersion: welcome.serverVersion }, "session established");
    await this.opts.updates?.welcomed();
    await catchUpSequences(this.store, welcome.streamSequences);
    this.renewal.follow(welcome.instructions);
    this.renewal.checkDue(this.config);
    this.every(ms(this.config?.heartbeatInterval, defaults.heartbeatMs), async () => {
      this.renewal.follow(await sendHeartbeat(this.heartbeat));
      this.renewal.checkDue(this.config);
    });
    void sendHeartbeat(this.heartbeat);
    const deployments = this.opts.deployments;
    if (deployments !== undefined) {
      this.cadences.push(
        deployments.onLost(() => {
          this.outbox
            .send({ case: "heldDeployments", value: { deployments: deployments.held() } })
            .catch((err: unknown) => log.warn({ error: (err as Error).message }, "telling the server of a lost runtime failed"));
        }),
      );
    }
    const reports = this.reports;
    if (reports === undefined) return;
    // A collection slower than the interval is not stacked on.
    this.every(ms(this.config?.telemetryInterval, defaults.telemetryMs), () => reports.round(), false);
    void reports
      .inventory(true)
      .then(() => reports.telemetry())
      .catch((err: unknown) => log.warn({ error: (err as Error).message }, "first report failed"));
  }

  private every(intervalMs: number, task: () => Promise<unknown>, overlap = true): void {
    const run = () => task().catch((err: unknown) => this.opts.log.warn({ error: (err as Error).message }, "periodic task failed"));
    this.cadences.push(repeat(intervalMs, run, { overlap }));
  }
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

/** A duration the server set, or the default when it set none. */
function ms(d: Parameters<typeof durationMs>[0] | undefined, fallback: number): number {
  const v = d === undefined ? 0 : durationMs(d);
  return v > 0 ? v : fallback;
}
