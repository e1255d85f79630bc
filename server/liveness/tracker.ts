// A node's liveness right now: the pure rule (./rules.ts) over the newer of the
// heartbeat held in memory and the persisted one, at the injected clock's time. The one place
// that builds that call, for views, leasing and the reconciler alike.
import type { Clock } from "../../common/clock.js";
import { computeLiveness, type Liveness, type LivenessThresholds } from "./rules.js";
import type { HeartbeatBook } from "./heartbeats.js";

export interface LivenessFacts {
  id: string;
  lastHeartbeatAt: Date | null;
  disabledAt?: Date | null;
  decommissionedAt?: Date | null;
}

export class LivenessTracker {
  constructor(
    private readonly heartbeats: HeartbeatBook,
    readonly thresholds: LivenessThresholds,
    private readonly clock: Clock,
  ) {}

  /** The newest heartbeat time known for the node, in memory or in its row. */
  lastHeartbeatAt(node: Pick<LivenessFacts, "id" | "lastHeartbeatAt">): number | null {
    return this.heartbeats.lastHeartbeatAt(node.id, node.lastHeartbeatAt);
  }

  of(node: LivenessFacts, now = this.clock.now()): Liveness {
    return computeLiveness(
      {
        lastHeartbeatAt: this.lastHeartbeatAt(node),
        disabled: (node.disabledAt ?? null) !== null,
        decommissioned: (node.decommissionedAt ?? null) !== null,
      },
      now,
      this.thresholds,
    );
  }
}
