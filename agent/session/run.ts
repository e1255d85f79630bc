// The agent's main loop: keep one Session open (./session.ts), and reconnect after any
// failure with exponential backoff and jitter, always on the identity persisted in the state file.
import { Code, ConnectError } from "@connectrpc/connect";
import { codeName } from "../../common/codes.js";
import { readState, StateStore, StateError, type AgentState } from "../state.js";
import { backoffDelay, retryAfterDelay } from "./timing.js";
import { validityReader } from "../pki/validity.js";
import { systemClock } from "../../common/clock.js";
import { CredentialRefusals, refusalAdvice } from "./credential-refusal.js";
import { VersionRefusals, versionRefusalDelay, versionRefusalOf } from "./version-refusal.js";
import { agentVersion } from "../version.js";
import { AgentSession, Reconnect } from "./session.js";
import type { RunOptions } from "./options.js";

export type { SessionLink } from "./link.js";
export type { RunOptions, SessionJobs } from "./options.js";

/**
 * The longest reconnect delay (full jitter under it). It bounds how long a fleet takes to come
 * back after an outage of any length: the last agent retries at most this long after the control
 * plane is back (bench/heartbeats.ts RESTARTS). Attempts against a down control plane cost it
 * nothing, and a control plane that is up but busy says when to retry (retry-after), which this
 * does not shorten.
 */
const defaultBackoffMaxMs = 10_000;

export async function runAgent(opts: RunOptions): Promise<void> {
  await new Reconnects(opts).run();
}

/** The loop of sessions, and what it remembers between them: the backoff and the refusals heard. */
class Reconnects {
  private attempt = 0;
  private readonly refusals = new CredentialRefusals();
  private readonly versionRefusals = new VersionRefusals();
  private readonly validity = validityReader();

  constructor(private readonly opts: RunOptions) {}

  async run(): Promise<void> {
    const { signal, statePath } = this.opts;
    while (!signal.aborted) {
      // Re-read each time: `agent enroll --force` may have replaced the identity meanwhile.
      const state = await readState(statePath);
      if (state === undefined) throw new StateError(`no agent state at ${statePath}: run "agent enroll" first`);
      const delay = await this.session(state);
      if (delay !== undefined) await systemClock.sleep(delay, signal);
    }
  }

  /** Runs one session to its end; resolves with how long to wait before the next (none: at once). */
  private async session(state: AgentState): Promise<number | undefined> {
    const { observer, metrics, signal } = this.opts;
    let opened = false;
    // A Welcome proves the credential and the version are accepted: a later refusal is news again.
    const established = () => {
      opened = true;
      this.refusals.accepted();
      this.versionRefusals.accepted();
    };
    try {
      await new AgentSession(new StateStore(this.opts.statePath, state), this.opts, established, this.validity).run();
      observer?.ended?.(undefined, opened);
      this.attempt = 0;
      if (!signal.aborted) metrics?.reconnecting("ended");
      return this.backoff();
    } catch (err) {
      if (err instanceof Reconnect) {
        observer?.ended?.(undefined, opened);
        this.attempt = 0;
        metrics?.reconnecting("renewed");
        return undefined;
      }
      if (signal.aborted) return undefined;
      return this.failed(err, state, opened);
    }
  }

  /** Logs why a session failed and says how long to wait before the next. */
  private failed(err: unknown, state: AgentState, opened: boolean): number {
    const { log } = this.opts;
    const now = (this.opts.clock ?? systemClock).now();
    const ce = ConnectError.from(err);
    this.opts.metrics?.reconnecting(ce.code);
    this.opts.observer?.ended?.(ce, opened);
    const tooOld = versionRefusalOf(err);
    if (tooOld !== undefined) {
      // Refused for its version: only an upgrade helps, so no fast retries and no log flood.
      if (this.versionRefusals.due(now)) {
        log.error(
          { nodeId: state.nodeId, agentVersion, code: codeName(ce.code), reason: tooOld },
          `the control plane refused this agent: ${tooOld}`,
        );
      }
      return versionRefusalDelay(this.opts.backoffMaxMs ?? 30_000);
    }
    // Status, method and path only: never a body or credential.
    log.warn(
      { code: codeName(ce.code), method: "Session", path: "/modelforge.agent.v1.AgentService/Session", reason: ce.rawMessage },
      "session failed",
    );
    const refusal = this.refusals.failed(err, now);
    if (refusal !== undefined) log.error({ nodeId: state.nodeId, reason: refusal.reason }, refusalAdvice(refusal, state.nodeId));
    // A server starting up answers, and says when to come back: no exponential growth for that.
    const hinted =
      ce.code === Code.Unavailable
        ? retryAfterDelay(ce.metadata.get("retry-after"), this.opts.backoffMaxMs ?? defaultBackoffMaxMs)
        : undefined;
    // A session that had opened ended under us (a server restart): the whole fleet lost it at once,
    // so start over from the jittered base rather than from where the last outage left off.
    if (opened || hinted !== undefined) this.attempt = 0;
    return hinted ?? this.backoff();
  }

  private backoff(): number {
    return backoffDelay(this.attempt++, this.opts.backoffBaseMs ?? 500, this.opts.backoffMaxMs ?? defaultBackoffMaxMs);
  }
}
