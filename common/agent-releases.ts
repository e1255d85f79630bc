// Where an agent release's bytes live in the artifact store, shared by the CLI that pushes them,
// the control plane that records and serves them, and the agent that names its own platform.

/** The artifact store repository every release's bytes are pushed to. */
export const releaseRepository = "modelforge/agent";

/** The store's name for a release's file: the commit is named by the content (its digest's first 40 hex). */
export function releaseArtifact(
  sha256: string,
  name: { version: string; platform: string },
): { repository: string; commit: string; path: string } {
  return { repository: releaseRepository, commit: sha256.slice(0, 40), path: `modelforge-agent-${name.version}-${name.platform}` };
}

/** This process's platform as releases name it, e.g. "linux-x64". */
export function currentPlatform(): string {
  return `${process.platform}-${process.arch}`;
}
