// The routing view of deployments the relay reads, as server/deployments/ provides it.
export type {
  DeploymentInstanceRoute as DeploymentInstance,
  DeploymentPhase,
  DeploymentRoutes,
  DeploymentTarget,
} from "../deployments/routes.js";
