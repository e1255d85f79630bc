// Requests for an autoscaled deployment with no ready replica wait here, in arrival order, while a
// replica is placed, acquired and loaded (Ray Serve holds requests so at zero replicas; llm-d's
// flow control during a cold start), instead of being refused. At zero the first of them asks for a
// replica at once. Bounded in count per deployment and in time; past either, and when this control
// plane begins to stop, a waiting request is refused `unavailable` with a Retry-After, which a
// client retries: none is dropped without an answer.
import { Code, ConnectError } from "@connectrpc/connect";
import type { Clock } from "../../common/clock.js";
import { onAbort } from "../../common/abort.js";
import type { Logger } from "../observability/logger.js";
import type { ColdStartMetrics } from "../observability/metrics.js";
import type { DeploymentRoutes, DeploymentTarget } from "../deployments/routes.js";

export interface ColdStartDeps {
  clock: Clock;
  log: Logger;
  routes: Pick<DeploymentRoutes, "find" | "onChange">;
  /** Asks for a first replica of a deployment at zero; resolves true when this call set it. */
  wake(target: DeploymentTarget): Promise<boolean>;
  /** Requests held per deployment here; more are refused. */
  maxHeld: number;
  /** How often a held request's `whileHeld` is called. */
  keepAliveMs: number;
  /** How often the route is read again while requests wait: the safety net under the bus's announcements. */
  pollMs?: number;
  /** Told when a request starts and stops waiting. */
  holding?(deploymentId: string, delta: 1 | -1): void;
  metrics?: ColdStartMetrics;
}

/** One request's wait. */
export interface HeldCall {
  /** The caller's own bound, when it gave one: the wait is the shorter of it and the cold-start timeout. */
  timeoutMs: number | undefined;
  signal: AbortSignal;
  /** Called every keep-alive period while the request waits (the OpenAI API sends an SSE comment). */
  whileHeld?: () => void;
}

/** How long a refused caller is told to wait before trying again, in seconds. */
const retryAfterSeconds = 5;

/** Whether a request waits for a replica: the deployment is autoscaled and serving, the caller may call it, and none is ready. */
export function mustWait(
  target: DeploymentTarget | undefined,
  scope: ReadonlySet<string>,
): target is DeploymentTarget & {
  coldStart: NonNullable<DeploymentTarget["coldStart"]>;
} {
  return target?.coldStart !== undefined && scope.has(target.name) && target.ready.length === 0;
}

interface Waiter {
  settle(outcome: { target: DeploymentTarget | undefined } | { error: ConnectError }): void;
}

interface Waiting {
  name: string;
  waiters: Waiter[];
  /** When this replica asked for the first replica; undefined when it did not (another did, or it was not at zero). */
  wokeAt: number | undefined;
  checking: boolean;
  again: boolean;
  stop(): void;
}

export class ColdStarts {
  private readonly waiting = new Map<string, Waiting>();
  private stopped = false;

  constructor(private readonly deps: ColdStartDeps) {}

  /** Requests waiting for the deployment here. */
  heldOf(deploymentId: string): number {
    return this.waiting.get(deploymentId)?.waiters.length ?? 0;
  }

  /**
   * Waits for a ready replica: resolves with the deployment's route once one is ready, or once the
   * deployment stopped waiting for one (drained, unloaded, deleted, autoscaling off), for the
   * caller's routing to answer as it would. Throws unavailable past the bounds, canceled when the
   * caller goes away.
   */
  async wait(target: DeploymentTarget & { coldStart: { timeoutMs: number } }, call: HeldCall): Promise<DeploymentTarget | undefined> {
    const { clock } = this.deps;
    if (this.stopped) throw stopping();
    // Gone already: its abort would fire before it is in the queue, and it would wait out the timeout.
    if (call.signal.aborted) throw new ConnectError("the caller went away", Code.Canceled);
    const w = this.waiting.get(target.deploymentId) ?? this.watch(target);
    if (w.waiters.length >= this.deps.maxHeld) {
      throw new ConnectError(
        `deployment ${target.name} already has ${this.deps.maxHeld} requests waiting for a replica to load: retry later`,
        Code.Unavailable,
        retryAfter(),
      );
    }
    const waitMs = Math.min(target.coldStart.timeoutMs, call.timeoutMs ?? Number.POSITIVE_INFINITY);
    return new Promise((resolve, reject) => {
      let keepAlive: (() => void) | undefined;
      const beat = () => {
        keepAlive = clock.after(this.deps.keepAliveMs, () => {
          call.whileHeld?.();
          beat();
        });
      };
      if (call.whileHeld !== undefined) beat();
      const waiter: Waiter = {
        settle: (outcome) => {
          const at = w.waiters.indexOf(waiter);
          if (at < 0) return;
          w.waiters.splice(at, 1);
          this.counted(target, -1);
          keepAlive?.();
          stopTimer();
          forgetCaller();
          if ("error" in outcome) reject(outcome.error);
          else resolve(outcome.target);
          if (w.waiters.length === 0) this.forget(target.deploymentId, w);
        },
      };
      const stopTimer = clock.after(waitMs, () =>
        waiter.settle({
          error: new ConnectError(
            `deployment ${target.name} has no ready replica after waiting ${Math.round(waitMs / 1000)} s for one to load: retry later`,
            Code.Unavailable,
            retryAfter(),
          ),
        }),
      );
      const forgetCaller = onAbort(call.signal, () => waiter.settle({ error: new ConnectError("the caller went away", Code.Canceled) }));
      w.waiters.push(waiter);
      this.counted(target, 1);
    });
  }

  /** The control plane is stopping: every waiting request is refused, retryable elsewhere. */
  stop(): void {
    this.stopped = true;
    for (const w of [...this.waiting.values()]) for (const waiter of [...w.waiters]) waiter.settle({ error: stopping() });
  }

  private counted(target: DeploymentTarget, delta: 1 | -1): void {
    this.deps.holding?.(target.deploymentId, delta);
    this.deps.metrics?.held(target.name, this.heldOf(target.deploymentId));
  }

  /** Starts following a deployment that has requests waiting: its announced changes, and a poll. */
  private watch(target: DeploymentTarget & { coldStart: { replicas: number } }): Waiting {
    const { clock } = this.deps;
    let stopPoll: () => void = () => {};
    const poll = () => {
      stopPoll = clock.after(this.deps.pollMs ?? 1_000, () => {
        void this.check(target.deploymentId);
        poll();
      });
    };
    const unlisten = this.deps.routes.onChange((id) => {
      if (id === target.deploymentId) void this.check(id);
    });
    const w: Waiting = {
      name: target.name,
      waiters: [],
      wokeAt: undefined,
      checking: false,
      again: false,
      stop: () => {
        stopPoll();
        unlisten();
      },
    };
    this.waiting.set(target.deploymentId, w);
    poll();
    if (target.coldStart.replicas === 0) this.wake(target, w);
    return w;
  }

  private wake(target: DeploymentTarget, w: Waiting): void {
    const askedAt = this.deps.clock.now();
    this.deps
      .wake(target)
      .then((woke) => {
        if (!woke) return;
        w.wokeAt = askedAt;
        this.deps.metrics?.coldStart(target.name);
        this.deps.log.info(
          { deploymentId: target.deploymentId, deployment: target.name },
          "cold start: a request is held while a replica loads",
        );
      })
      .catch((err: unknown) =>
        this.deps.log.warn(
          { deploymentId: target.deploymentId, error: (err as Error).message },
          "asking for a replica for a held request failed",
        ),
      );
  }

  /** Reads the route afresh; releases every waiter, in order, once it says they need not wait. */
  private async check(deploymentId: string): Promise<void> {
    const w = this.waiting.get(deploymentId);
    if (w === undefined) return;
    if (w.checking) {
      w.again = true;
      return;
    }
    w.checking = true;
    try {
      do {
        w.again = false;
        const fresh = await this.deps.routes.find(deploymentId).catch(() => "unknown" as const);
        if (fresh === "unknown" || this.waiting.get(deploymentId) !== w) continue;
        if (fresh === undefined || fresh.coldStart === undefined || fresh.ready.length > 0) {
          if (w.wokeAt !== undefined && fresh?.ready.length) this.deps.metrics?.coldStartSeconds(w.name, this.deps.clock.now() - w.wokeAt);
          for (const waiter of [...w.waiters]) waiter.settle({ target: fresh });
          return;
        }
        // Scaled back to zero under the waiters (a race with the autoscaler): ask again.
        if (fresh.coldStart.replicas === 0) this.wake(fresh, w);
      } while (w.again);
    } finally {
      w.checking = false;
    }
  }

  private forget(deploymentId: string, w: Waiting): void {
    if (this.waiting.get(deploymentId) !== w) return;
    this.waiting.delete(deploymentId);
    w.stop();
  }
}

function retryAfter(): Headers {
  return new Headers({ "retry-after": String(retryAfterSeconds) });
}

function stopping(): ConnectError {
  return new ConnectError("this control plane is shutting down: retry on another replica", Code.Unavailable, retryAfter());
}
