// What this control plane sees of each deployment's load, for the autoscaler: requests in flight
// through its relay plus those it holds for a cold start, sampled on a fixed beat and averaged over
// the window; and when the latest request came. A request queued at an agent is in flight at
// exactly one relay, so the sum over the control planes counts every request once (adding the
// agents' reported queues would count those twice).
import type { PrismaClient } from "../../gen/prisma/client.js";

interface Live {
  inFlight: number;
  held: number;
  lastRequestAt: number | undefined;
  /** The latest samples, oldest first, at most the window's worth. */
  samples: number[];
  /** What the last report said, so an idle deployment is not written again and again. */
  reported: { load: number; lastRequestAt: number | undefined } | undefined;
}

/** One deployment's load as a report row carries it. */
export interface LoadReport {
  deploymentId: string;
  load: number;
  held: number;
  lastRequestAt: number | undefined;
}

export class ServingActivity {
  private readonly live = new Map<string, Live>();

  /** @param windowSamples samples averaged (the window over the sampling beat). */
  constructor(private readonly windowSamples: number) {}

  private entry(deploymentId: string): Live {
    let e = this.live.get(deploymentId);
    if (e === undefined) {
      e = { inFlight: 0, held: 0, lastRequestAt: undefined, samples: [], reported: undefined };
      this.live.set(deploymentId, e);
    }
    return e;
  }

  /** A request arrived for the deployment and is in flight until the function it returns is called. */
  began(deploymentId: string, now: number): () => void {
    const e = this.entry(deploymentId);
    e.inFlight++;
    e.lastRequestAt = now;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      e.inFlight--;
    };
  }

  /** A request began or stopped waiting for a cold start (it stays in flight either way). */
  holding(deploymentId: string, delta: 1 | -1): void {
    this.entry(deploymentId).held += delta;
  }

  /** Held for a cold start here now. */
  heldOf(deploymentId: string): number {
    return this.live.get(deploymentId)?.held ?? 0;
  }

  /**
   * Whether this control plane has a request for the deployment in flight or held, or saw one at
   * `since` or later: what its load reports have not said yet.
   */
  servedSince(deploymentId: string, since: number): boolean {
    const e = this.live.get(deploymentId);
    return e !== undefined && (e.inFlight > 0 || e.held > 0 || (e.lastRequestAt ?? Number.NEGATIVE_INFINITY) >= since);
  }

  /** Takes one sample of every deployment's requests in flight. */
  sample(): void {
    for (const e of this.live.values()) {
      e.samples.push(e.inFlight);
      if (e.samples.length > this.windowSamples) e.samples.shift();
    }
  }

  /**
   * The rows to write: each deployment with a load, or whose latest request changed since the last
   * report (an idle one is written once at zero, then left; its row goes stale and counts as zero). A
   * deployment idle for the whole window, with nothing reported outstanding, is forgotten.
   */
  report(): LoadReport[] {
    const out: LoadReport[] = [];
    for (const [deploymentId, e] of this.live) {
      const load = e.samples.length === 0 ? 0 : e.samples.reduce((a, b) => a + b, 0) / e.samples.length;
      const same = e.reported !== undefined && e.reported.load === load && e.reported.lastRequestAt === e.lastRequestAt;
      // A steady load is written again each time, so that its row stays fresh.
      if (!same || load > 0 || e.held > 0) out.push({ deploymentId, load, held: e.held, lastRequestAt: e.lastRequestAt });
      e.reported = { load, lastRequestAt: e.lastRequestAt };
      if (same && load === 0 && e.inFlight === 0) this.live.delete(deploymentId);
    }
    return out;
  }
}

/**
 * Writes this replica's rows. A deployment deleted meanwhile has no row written (the insert reads
 * it), rather than failing the batch on the foreign key. lastRequestAt never moves back.
 */
export async function writeLoadReports(prisma: PrismaClient, replicaId: string, rows: LoadReport[], now: Date): Promise<void> {
  for (const r of rows) {
    const last = r.lastRequestAt === undefined ? null : new Date(r.lastRequestAt);
    await prisma.$executeRaw`
      INSERT INTO "ServingLoad" ("replicaId", "deploymentId", "load", "held", "lastRequestAt", "reportedAt")
      SELECT ${replicaId}, d.id, ${r.load}, ${r.held}, ${last}, ${now} FROM "Deployment" AS d WHERE d.id = ${r.deploymentId}::uuid
      ON CONFLICT ("replicaId", "deploymentId") DO UPDATE SET
        "load" = EXCLUDED."load",
        "held" = EXCLUDED."held",
        "lastRequestAt" = GREATEST("ServingLoad"."lastRequestAt", EXCLUDED."lastRequestAt"),
        "reportedAt" = EXCLUDED."reportedAt"`;
  }
}
