// What one relayed request used, as it passes: its tokens (./../usage/tally.ts), its time to first
// token and between tokens, and at its end one entry for the key's usage and the deployment's
// Prometheus counters. No I/O: the ledger and the counters are in memory.
import type { Clock } from "../../common/clock.js";
import type { ServingMetrics } from "../observability/metrics.js";
import type { UsageLedger } from "../usage/ledger.js";
import { emptyTally, type Passed, tallyPiece, tokensOf } from "../usage/tally.js";
import { callerWantsUsage } from "./rules.js";

export interface MeterDeps {
  clock: Clock;
  usage?: Pick<UsageLedger, "record">;
  metrics?: ServingMetrics;
}

export class InvokeMeter {
  private readonly tally = emptyTally();
  private readonly wants: { last: boolean; every: boolean };
  private readonly began: number;
  private firstTokenMs: number | undefined;
  private lastTokenAt = 0;

  constructor(
    private readonly deps: MeterDeps,
    private readonly request: { keyId: string; deploymentId: string; deployment: string; stream: boolean },
    body: Record<string, unknown>,
  ) {
    this.wants = callerWantsUsage(body);
    this.began = deps.clock.now();
    deps.metrics?.started(request.deployment);
  }

  /** One answer piece from the node: what the caller gets of it (nothing for usage it did not ask for). */
  pass(payload: Uint8Array): Passed {
    if (payload.length === 0) return undefined;
    const passed = tallyPiece(this.tally, payload, this.request.stream, this.wants);
    if (passed?.token) {
      const now = this.deps.clock.now();
      if (this.firstTokenMs === undefined) this.firstTokenMs = now - this.began;
      else this.deps.metrics?.interToken(this.request.deployment, now - this.lastTokenAt);
      this.lastTokenAt = now;
    }
    return passed;
  }

  /** The request ended: "ok" or its Connect code name. Its tokens, prompt and completion. */
  end(outcome: string): number {
    const { keyId, deploymentId, deployment } = this.request;
    const tokens = tokensOf(this.tally);
    const firstTokenMs = this.firstTokenMs;
    this.deps.usage?.record({ keyId, deploymentId, outcome, ...tokens, firstTokenMs });
    this.deps.metrics?.finished({ deployment, outcome, durationMs: this.deps.clock.now() - this.began, ...tokens, firstTokenMs });
    return tokens.promptTokens + tokens.completionTokens;
  }
}
