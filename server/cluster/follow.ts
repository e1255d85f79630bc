// What a replica does with what the others tell it (./bus.ts): act for the sessions held here.
import { ConnectError } from "@connectrpc/connect";
import type { ClusterBus, ClusterEvent } from "./bus.js";

export function followCluster(
  bus: Pick<ClusterBus, "onEvent">,
  deps: {
    /** The sessions held here (server/sessions/registry.ts). */
    sessions: {
      closeNodeHere(nodeId: string, reason: ConnectError): void;
      closeSerialsHere(serials: Iterable<string>, reason: ConnectError): void;
    };
    jobs: { fromCluster(event: Extract<ClusterEvent, { kind: "work" | "cancel" }>): void };
    deployments: { changedElsewhere(deploymentId: string): void };
    /** The operators' calls open here (server/identity/operators/live-calls.ts). */
    operators: { endCallsOf(userId: string): void };
  },
): void {
  bus.onEvent((event) => {
    switch (event.kind) {
      case "work":
      case "cancel":
        return deps.jobs.fromCluster(event);
      case "close-node":
        return deps.sessions.closeNodeHere(event.nodeId, new ConnectError(event.message, event.code));
      case "close-serials":
        return deps.sessions.closeSerialsHere(event.serials, new ConnectError(event.message, event.code));
      case "deployment":
        return deps.deployments.changedElsewhere(event.deploymentId);
      case "user-deactivated":
        return deps.operators.endCallsOf(event.userId);
    }
  });
}
