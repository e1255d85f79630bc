// The routing view of deployments the relay reads: the interface server/deployments/ implements
// (the lead's module). Kept here as types only until that module lands on main.
export type DeploymentPhase = "LOADING" | "READY" | "DRAINING" | "UNLOADED" | "FAILED";
export interface DeploymentInstance {
  revision: bigint;
  nodeId: string;
  phase: DeploymentPhase;
}
export interface DeploymentTarget {
  deploymentId: string;
  name: string;
  /** The deployment's overall state, for typed errors (LOADING: not ready; DRAINING: draining; ...). */
  phase: DeploymentPhase;
  /** Per-deployment bounds the operator set. */
  maxInFlight: number;
  invokeTimeoutMs: number;
  /** Instances that take new invokes (READY), newest revision first; empty when none. */
  ready: DeploymentInstance[];
}
export interface DeploymentRoutes {
  /** By id or name; undefined when no such deployment (or it was deleted). */
  find(idOrName: string): Promise<DeploymentTarget | undefined>;
  /** Deployments by name (all when names is undefined), for DeploymentService.ListDeployments. */
  list(names: string[] | undefined, offset: number, take: number): Promise<DeploymentTarget[]>;
  /** Called on this replica whenever a deployment's routing changes (drain, revision, unload), so a relay cache can drop it at once. */
  onChange(listener: (deploymentId: string) => void): () => void;
}
