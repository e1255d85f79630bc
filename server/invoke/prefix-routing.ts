// Prefix-aware routing for the relay: each deployment's index (./prefix-index.ts) kept in step with
// its route, the rule (./prefix-rules.ts) applied to a request's prompt, and what was decided counted.
import { InvokeApi } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import type { PrefixRoutingMetrics } from "../observability/metrics.js";
import { blockHashes, keyHash, promptText } from "./prefix-blocks.js";
import { bytesPerBlock, PrefixIndex } from "./prefix-index.js";
import { defaultPrefixPolicy, pickByPrefix, type PrefixPolicy } from "./prefix-rules.js";
import type { DeploymentTarget } from "./routes.js";
import type { CheckedPayload, ReplicaLoad } from "./rules.js";

type Replica = DeploymentTarget["ready"][number];

/** A request's prompt as the index sees it. */
export interface PromptKey {
  hashes: number[];
  /** The hash of its `prompt_cache_key`, else of its `user`, when it names one. */
  session: number | undefined;
}

export interface PrefixRoutingOptions {
  /** The index's memory per deployment, in bytes. */
  budgetBytes: number;
  metrics?: PrefixRoutingMetrics;
  policy?: PrefixPolicy;
}

/**
 * A replica as its deployment's index knows it, "<revision>/<slot>/<runtime id>": its slot and the
 * runtime in it, so a restart is a new replica. The metrics' label is the part before the runtime.
 */
export const identityOf = (r: Replica) => `${r.revision}/${r.replica}/${r.runtimeId}`;
const labelOf = (identity: string) => identity.slice(0, identity.lastIndexOf("/"));

export class PrefixRouting {
  private readonly indexes = new Map<string, { index: PrefixIndex; name: string; seen: readonly Replica[] }>();
  private readonly maxBlocks: number;

  constructor(private readonly options: PrefixRoutingOptions) {
    this.maxBlocks = Math.max(1, Math.floor(options.budgetBytes / bytesPerBlock));
  }

  /**
   * The request's prompt key; undefined for a request with no prompt to route by (embeddings). A
   * session is named within its service key (`keyId`): two clients' "user-1" are two sessions.
   */
  promptOf(checked: CheckedPayload, keyId: string): PromptKey | undefined {
    if (checked.api === InvokeApi.EMBEDDINGS) return undefined;
    const text = promptText(checked.api === InvokeApi.CHAT_COMPLETIONS ? "chat" : "completion", checked.body);
    const named = checked.body.prompt_cache_key ?? checked.body.user;
    return {
      hashes: blockHashes(text),
      session: typeof named === "string" && named !== "" ? keyHash(`${keyId}\u0000${named}`) : undefined,
    };
  }

  /** The replica for this prompt among `open` (not yet tried), recorded as sent there; undefined when all are at `bound`. */
  choose(
    deployment: DeploymentTarget,
    open: readonly Replica[],
    load: (r: Replica) => ReplicaLoad,
    random: () => number,
    prompt: PromptKey,
  ) {
    const index = this.indexFor(deployment);
    const matched = index.matches(prompt.hashes);
    const bound = prompt.session === undefined ? undefined : index.session(prompt.session);
    const choice = pickByPrefix(
      open,
      load,
      deployment.maxInFlight,
      random,
      {
        promptBlocks: prompt.hashes.length,
        matched: (r) => (matched.size === 0 ? 0 : (matched.get(identityOf(r)) ?? 0)),
        session: bound === undefined ? undefined : open.find((r) => identityOf(r) === bound),
      },
      this.options.policy ?? defaultPrefixPolicy,
    );
    const replica = choice.replica;
    if (replica === undefined) return undefined;
    this.options.metrics?.routed(deployment.name, choice.decision);
    const chosen = identityOf(replica);
    index.record(prompt.hashes, chosen);
    if (prompt.session !== undefined) index.bindSession(prompt.session, chosen);
    return replica;
  }

  /** Blocks held per deployment and replica, for the metrics. */
  sizes(): { deployment: string; replica: string; blocks: number }[] {
    const sizes: { deployment: string; replica: string; blocks: number }[] = [];
    for (const { index, name } of this.indexes.values()) {
      for (const [identity, blocks] of index.blocksByReplica()) sizes.push({ deployment: name, replica: labelOf(identity), blocks });
    }
    return sizes;
  }

  /** The deployment's index, first forgetting the replicas its route no longer lists as ready (unloaded, restarted, replaced). */
  private indexFor(deployment: DeploymentTarget): PrefixIndex {
    let entry = this.indexes.get(deployment.deploymentId);
    if (entry === undefined) {
      entry = { index: new PrefixIndex(this.maxBlocks), name: deployment.name, seen: deployment.ready };
      this.indexes.set(deployment.deploymentId, entry);
    } else if (entry.seen !== deployment.ready) {
      entry.index.retain(new Set(deployment.ready.map(identityOf)));
      entry.seen = deployment.ready;
      entry.name = deployment.name;
    }
    return entry.index;
  }

  /** Whether a deployment has an index here. */
  knows(deploymentId: string): boolean {
    return this.indexes.has(deploymentId);
  }

  /** A deployment's route changed: replicas it no longer lists are forgotten now, and a deployment gone entirely is dropped. */
  changed(deploymentId: string, target: DeploymentTarget | undefined): void {
    const entry = this.indexes.get(deploymentId);
    if (entry === undefined) return;
    if (target === undefined || target.ready.length === 0) this.indexes.delete(deploymentId);
    else this.indexFor(target);
  }
}
