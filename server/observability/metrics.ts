// The control plane's Prometheus metrics: one Registry per server (tests start several in one
// process), defined here and handed to each feature as the narrow interface of the few counters it
// moves (SessionMetrics, JobMetrics, ...), never as a global. Gauges of state (sessions, admission,
// nodes, jobs) are read when scraped. Every metric is listed in docs/metrics.md.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import type { Code, Interceptor } from "@connectrpc/connect";
import type { FleetCounts } from "./metrics-db.js";
import { nodeStates, queryErrorKind, rpcOutcome, sessionRefusalReason } from "./metrics-rules.js";

/** What a Session counts (../sessions/session.ts). */
export interface SessionMetrics {
  opened(): void;
  /** The session ended before it was open, with this status. */
  refused(code: Code): void;
  heartbeat(): void;
}

/** What the job engine counts (../jobs). */
export interface JobMetrics {
  leaseGranted(): void;
  leaseExpired(): void;
  leaseReclaimed(): void;
  /** A job's first lease was handed out (pushed or claimed) this long after the job was created. */
  dispatched(ms: number): void;
}

/** What the invoke relay counts per deployment (../invoke/relay.ts), labelled by the deployment's name. */
export interface ServingMetrics {
  /** A request was admitted and is now in flight. */
  started(deployment: string): void;
  /** A request ended: "ok" or its Connect code name. */
  finished(r: ServedRequest): void;
  /** The time between two token chunks of one stream. */
  interToken(deployment: string, ms: number): void;
  /** A request refused before it was admitted (the deployment's requests in flight were used up). */
  refused(deployment: string, outcome: string): void;
}

/** What the cold starts count (../invoke/cold-start.ts), labelled by the deployment's name. */
export interface ColdStartMetrics {
  /** Requests held for the deployment on this replica now. */
  held(deployment: string, count: number): void;
  /** This replica asked for a first replica of a deployment at zero. */
  coldStart(deployment: string): void;
  /** From that ask to the first ready replica. */
  coldStartSeconds(deployment: string, ms: number): void;
}

/** What prefix-aware routing counts (../invoke/prefix-routing.ts), labelled by the deployment's name. */
export interface PrefixRoutingMetrics {
  /** A replica was chosen for a request, and why: session, matched, no_match or overloaded. */
  routed(deployment: string, decision: string): void;
}

/** The prefix index's size now, per deployment and replica ("<revision>/<slot>"), read when scraped. */
export type PrefixIndexSizes = () => { deployment: string; replica: string; blocks: number }[];

/** What evictions count (../deployments/controller.ts). */
export interface EvictionMetrics {
  /** An idle replica was evicted; `reason`: "make_room" (for a replica that fit no node). */
  evicted(reason: string): void;
}

export interface ServedRequest {
  deployment: string;
  outcome: string;
  durationMs: number;
  promptTokens: number;
  cachedPromptTokens: number;
  completionTokens: number;
  firstTokenMs: number | undefined;
}

/** What the scrape reads from the running server. */
export interface MetricSources {
  sessions: { readonly size: number };
  admission: { readonly queued: number; readonly running: number };
  /** Fleet-wide counts from the database; refreshed at most every `fleetRefreshMs`. */
  fleet: () => Promise<FleetCounts>;
}

/** How often the fleet counts (two grouped queries) may be read, however often anyone scrapes. */
const fleetRefreshMs = 1_000;

export class ServerMetrics {
  readonly registry = new Registry();
  readonly sessions: SessionMetrics;
  readonly jobs: JobMetrics;
  readonly serving: ServingMetrics;
  readonly coldStarts: ColdStartMetrics;
  readonly evictions: EvictionMetrics;
  readonly prefixRouting: PrefixRoutingMetrics;
  private prefixIndex: PrefixIndexSizes | undefined;
  private sources: MetricSources | undefined;
  private fleet: { at: number; counts: Promise<FleetCounts | undefined> } | undefined;

  private readonly heartbeatsReceived: Counter;
  private readonly heartbeatsFlushed: Counter;
  private readonly flushSeconds: Histogram;
  private readonly enrollments: Counter<"outcome">;
  private readonly queryErrors: Counter<"kind">;

  constructor() {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.replicaGauges(registers);
    const opens = new Counter({ name: "modelforge_session_opens_total", help: "Sessions opened (Welcome sent).", registers });
    const refusals = new Counter({
      name: "modelforge_session_refusals_total",
      help: "Sessions ended before they were open, by reason.",
      labelNames: ["reason"] as const,
      registers,
    });
    this.heartbeatsReceived = new Counter({
      name: "modelforge_heartbeats_received_total",
      help: "Heartbeats received (Session messages and unary Heartbeat calls).",
      registers,
    });
    this.heartbeatsFlushed = new Counter({
      name: "modelforge_heartbeats_flushed_total",
      help: "Node heartbeat times written to the database by the batched flush.",
      registers,
    });
    this.flushSeconds = new Histogram({
      name: "modelforge_heartbeat_flush_duration_seconds",
      help: "Duration of one heartbeat flush (one statement for the batch).",
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers,
    });
    this.enrollments = new Counter({
      name: "modelforge_enrollments_total",
      help: 'Enroll calls by outcome: "ok" or the refusal\'s status code.',
      labelNames: ["outcome"] as const,
      registers,
    });
    this.enrollments.inc({ outcome: "ok" }, 0);
    this.queryErrors = new Counter({
      name: "modelforge_db_query_errors_total",
      help: "Database statements that failed, by kind (unavailable, conflict, constraint, timeout, other).",
      labelNames: ["kind"] as const,
      registers,
    });
    this.fleetGauges(registers);

    const heartbeats = this.heartbeatsReceived;
    this.sessions = {
      opened: () => opens.inc(),
      refused: (code) => refusals.inc({ reason: sessionRefusalReason(code) }),
      heartbeat: () => heartbeats.inc(),
    };
    this.jobs = jobMetrics(registers);
    this.serving = servingMetrics(registers);
    this.coldStarts = coldStartMetrics(registers);
    const evictions = new Counter({
      name: "modelforge_evictions_total",
      help: "Idle replicas evicted by this replica's controller, by reason (make_room: for a replica that fit no node).",
      labelNames: ["reason"] as const,
      registers,
    });
    evictions.inc({ reason: "make_room" }, 0);
    this.evictions = { evicted: (reason) => evictions.inc({ reason }) };
    this.prefixRouting = this.prefixRoutingMetrics(registers);
  }

  /** The routing decisions, and the index's blocks read when scraped. */
  private prefixRoutingMetrics(registers: Registry[]): PrefixRoutingMetrics {
    const self = this;
    const routed = new Counter({
      name: "modelforge_prefix_routing_total",
      help: "Requests routed on this replica by prefix-aware routing, by deployment and decision (session, matched, no_match, overloaded).",
      labelNames: ["deployment", "decision"] as const,
      registers,
    });
    new Gauge({
      name: "modelforge_prefix_index_blocks",
      help: "Prompt blocks this replica's prefix index remembers per deployment and serving replica (<revision>/<slot>).",
      labelNames: ["deployment", "replica"] as const,
      registers,
      collect() {
        this.reset();
        for (const s of self.prefixIndex?.() ?? []) this.set({ deployment: s.deployment, replica: s.replica }, s.blocks);
      },
    });
    return { routed: (deployment, decision) => routed.inc({ deployment, decision }) };
  }

  /** Connects the prefix index's gauge to the relay's index. */
  observePrefixIndex(sizes: PrefixIndexSizes): void {
    this.prefixIndex = sizes;
  }

  /** Gauges of this replica's sessions and admission gate, read when scraped. */
  private replicaGauges(registers: Registry[]): void {
    const self = this;
    new Gauge({
      name: "modelforge_sessions_connected",
      help: "Session streams open on this replica.",
      registers,
      collect() {
        this.set(self.sources?.sessions.size ?? 0);
      },
    });
    new Gauge({
      name: "modelforge_admission_queue_depth",
      help: "Session opens waiting for the admission gate on this replica.",
      registers,
      collect() {
        this.set(self.sources?.admission.queued ?? 0);
      },
    });
    new Gauge({
      name: "modelforge_admission_in_progress",
      help: "Session opens running (holding an admission slot) on this replica.",
      registers,
      collect() {
        this.set(self.sources?.admission.running ?? 0);
      },
    });
  }

  /** Fleet-wide gauges from the database, read when scraped (at most every `fleetRefreshMs`). */
  private fleetGauges(registers: Registry[]): void {
    const self = this;
    new Gauge({
      name: "modelforge_nodes",
      help: "Nodes by state, fleet-wide (from the database; as of the last liveness reconcile).",
      labelNames: ["state"] as const,
      registers,
      async collect() {
        const counts = await self.fleetCounts();
        this.reset();
        if (counts === undefined) return;
        for (const state of nodeStates) this.set({ state }, 0);
        for (const n of counts.nodes) this.inc({ state: n.state }, n.count);
      },
    });
    new Gauge({
      name: "modelforge_deployment_replicas",
      help: 'Deployments\' replicas by state (pending, loading, ready, draining, failed), and "wanted": the replicas each wants now (fleet-wide, from the database).',
      labelNames: ["deployment", "state"] as const,
      registers,
      async collect() {
        const counts = await self.fleetCounts();
        this.reset();
        for (const r of counts?.replicas ?? []) this.set({ deployment: r.deployment, state: r.state }, r.count);
      },
    });
    new Gauge({
      name: "modelforge_jobs",
      help: "Jobs by state and capability, fleet-wide (from the database).",
      labelNames: ["state", "capability"] as const,
      registers,
      async collect() {
        const counts = await self.fleetCounts();
        this.reset();
        for (const j of counts?.jobs ?? []) this.inc({ state: j.state, capability: j.capability }, j.count);
      },
    });
  }

  /** Connects the scrape-time gauges to the running server (once its database is open). */
  observe(sources: MetricSources): void {
    this.sources = sources;
  }

  /** Runs a heartbeat flush, timing it and counting what it wrote. */
  async flushed(flush: () => Promise<number>): Promise<number> {
    const end = this.flushSeconds.startTimer();
    const written = await flush().finally(end);
    this.heartbeatsFlushed.inc(written);
    return written;
  }

  /** For ../db: hears of every failed statement. */
  readonly queryFailed = (err: unknown): void => this.queryErrors.inc({ kind: queryErrorKind(err) });

  /** Counts the unary calls that have no Session path of their own: Enroll outcomes and polled heartbeats. */
  interceptor(): Interceptor {
    return (next) => async (req) => {
      const method = req.method.name;
      if (req.service.typeName !== "modelforge.agent.v1.AgentService" || (method !== "Enroll" && method !== "Heartbeat")) {
        return next(req);
      }
      try {
        const res = await next(req);
        if (method === "Enroll") this.enrollments.inc({ outcome: "ok" });
        else this.heartbeatsReceived.inc();
        return res;
      } catch (err) {
        if (method === "Enroll") this.enrollments.inc({ outcome: rpcOutcome(err) });
        throw err;
      }
    };
  }

  /** The fleet counts, read at most every `fleetRefreshMs`; undefined while the database cannot answer. */
  private fleetCounts(): Promise<FleetCounts | undefined> {
    const sources = this.sources;
    if (sources === undefined) return Promise.resolve(undefined);
    const now = performance.now();
    if (this.fleet === undefined || now - this.fleet.at >= fleetRefreshMs) {
      this.fleet = { at: now, counts: sources.fleet().catch(() => undefined) };
    }
    return this.fleet.counts;
  }
}

/** The job engine's counters and dispatch histogram. */
function jobMetrics(registers: Registry[]): JobMetrics {
  const granted = new Counter({ name: "modelforge_leases_granted_total", help: "Job leases granted.", registers });
  const expired = new Counter({
    name: "modelforge_leases_expired_total",
    help: "Leases that lapsed on an online node (re-queued, failed or cancelled).",
    registers,
  });
  const reclaimed = new Counter({
    name: "modelforge_leases_reclaimed_total",
    help: "Leased jobs failed because their node stayed unreachable past the reclaim grace.",
    registers,
  });
  const dispatch = new Histogram({
    name: "modelforge_job_dispatch_seconds",
    help: "From a job's creation to its first lease being pushed down a Session or returned by ClaimJob.",
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    registers,
  });
  return {
    leaseGranted: () => granted.inc(),
    leaseExpired: () => expired.inc(),
    leaseReclaimed: () => reclaimed.inc(),
    dispatched: (ms) => dispatch.observe(Math.max(0, ms) / 1000),
  };
}

/** Seconds buckets for a generation's latencies: a token every few milliseconds up to a minute-long answer. */
const latencyBuckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

/** The serving counters, named after vLLM's where they mean the same (vllm:time_to_first_token_seconds, ...). */
function servingMetrics(registers: Registry[]): ServingMetrics {
  const deployment = ["deployment"] as const;
  const tokens = new Counter({
    name: "modelforge_tokens_total",
    help: "Tokens of service clients' requests, by deployment and kind (prompt, completion).",
    labelNames: ["deployment", "kind"] as const,
    registers,
  });
  // Apart from modelforge_tokens_total, whose kinds add up to the tokens processed: these are a part of its prompt tokens.
  const cachedPrompt = new Counter({
    name: "modelforge_cached_prompt_tokens_total",
    help: "Of the prompt tokens, those the runtimes reused from their prompt caches instead of evaluating.",
    labelNames: deployment,
    registers,
  });
  const requests = new Counter({
    name: "modelforge_requests_total",
    help: 'Service clients\' requests that ended, by deployment and outcome ("ok" or the status code).',
    labelNames: ["deployment", "outcome"] as const,
    registers,
  });
  const inFlight = new Gauge({
    name: "modelforge_requests_in_flight",
    help: "Requests in flight on this replica.",
    labelNames: deployment,
    registers,
  });
  const firstToken = new Histogram({
    name: "modelforge_time_to_first_token_seconds",
    help: "From a streamed request's arrival to its first token.",
    labelNames: deployment,
    buckets: latencyBuckets,
    registers,
  });
  const interToken = new Histogram({
    name: "modelforge_inter_token_latency_seconds",
    help: "Between two token chunks of one stream.",
    labelNames: deployment,
    buckets: latencyBuckets,
    registers,
  });
  const duration = new Histogram({
    name: "modelforge_request_duration_seconds",
    help: "From a request's arrival to its end (vLLM's e2e request latency).",
    labelNames: deployment,
    buckets: latencyBuckets,
    registers,
  });
  return {
    started: (name) => inFlight.inc({ deployment: name }),
    finished(r) {
      const labels = { deployment: r.deployment };
      inFlight.dec(labels);
      requests.inc({ ...labels, outcome: r.outcome });
      if (r.promptTokens > 0) tokens.inc({ ...labels, kind: "prompt" }, r.promptTokens);
      if (r.cachedPromptTokens > 0) cachedPrompt.inc(labels, r.cachedPromptTokens);
      if (r.completionTokens > 0) tokens.inc({ ...labels, kind: "completion" }, r.completionTokens);
      if (r.firstTokenMs !== undefined) firstToken.observe(labels, r.firstTokenMs / 1000);
      duration.observe(labels, r.durationMs / 1000);
    },
    interToken: (name, ms) => interToken.observe({ deployment: name }, ms / 1000),
    refused: (name, outcome) => requests.inc({ deployment: name, outcome }),
  };
}

/** Requests held while a replica loads, and the cold starts this replica asked for. */
function coldStartMetrics(registers: Registry[]): ColdStartMetrics {
  const held = new Gauge({
    name: "modelforge_requests_held",
    help: "Requests held on this replica for a deployment with no ready replica, waiting for one to load.",
    labelNames: ["deployment"] as const,
    registers,
  });
  const starts = new Counter({
    name: "modelforge_cold_starts_total",
    help: "Deployments at zero replicas this replica asked a replica for, for a held request.",
    labelNames: ["deployment"] as const,
    registers,
  });
  const seconds = new Histogram({
    name: "modelforge_cold_start_seconds",
    help: "From asking for a replica of a deployment at zero to its first ready replica.",
    labelNames: ["deployment"] as const,
    buckets: [0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600],
    registers,
  });
  return {
    held: (deployment, count) => held.set({ deployment }, count),
    coldStart: (deployment) => starts.inc({ deployment }),
    coldStartSeconds: (deployment, ms) => seconds.observe({ deployment }, Math.max(0, ms) / 1000),
  };
}
