// The version skew rule (docs/protocol.md, "Version skew policy"): a control plane accepts agents from its
// oldest accepted version on, by default two minor versions behind its own, and refuses an older
// one at Hello with both versions named. Pure, so the policy is a table test.

/** A semantic version: MAJOR.MINOR.PATCH, optionally -PRERELEASE and +BUILD (ignored in order). */
interface Version {
  core: [number, number, number];
  prerelease: string[];
}

const semver = /^v?(0|[1-9]\d{0,8})\.(0|[1-9]\d{0,8})\.(0|[1-9]\d{0,8})(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z.-]+)?$/;

export function parseVersion(text: string): Version | undefined {
  const m = semver.exec(text.trim());
  if (m === null) return undefined;
  return { core: [Number(m[1]), Number(m[2]), Number(m[3])], prerelease: m[4] === undefined ? [] : m[4].split(".") };
}

/** Negative when a < b, zero when equal, positive when a > b (semver precedence). */
export function compareVersions(a: Version, b: Version): number {
  for (let i = 0; i < 3; i++) if (a.core[i] !== b.core[i]) return a.core[i]! - b.core[i]!;
  // A release is newer than its prereleases.
  if (a.prerelease.length === 0 || b.prerelease.length === 0) return b.prerelease.length - a.prerelease.length;
  for (let i = 0; i < Math.min(a.prerelease.length, b.prerelease.length); i++) {
    const x = a.prerelease[i]!;
    const y = b.prerelease[i]!;
    if (x === y) continue;
    const xn = /^\d+$/.test(x);
    const yn = /^\d+$/.test(y);
    if (xn && yn) return Number(x) - Number(y);
    if (xn !== yn) return xn ? -1 : 1;
    return x < y ? -1 : 1;
  }
  return a.prerelease.length - b.prerelease.length;
}

/** The default oldest accepted agent: two minor versions behind the server, as x.y.0. */
export function defaultOldestAgentVersion(serverVersion: string): string {
  const v = parseVersion(serverVersion);
  if (v === undefined) throw new Error(`the server's own version "${serverVersion}" is not a semantic version`);
  return `${v.core[0]}.${Math.max(0, v.core[1] - 2)}.0`;
}

/** While the oldest accepted version is 0.0.0 every agent is accepted, even one with no usable version. */
function acceptsAll(oldest: Version): boolean {
  return oldest.core.every((n) => n === 0) && oldest.prerelease.length === 0;
}

/** Why an agent saying `agentVersion` is refused, or undefined when it is accepted. */
export function agentVersionRefusal(agentVersion: string, oldest: string, serverVersion: string): string | undefined {
  const floor = parseVersion(oldest);
  if (floor === undefined) throw new Error(`oldest accepted agent version "${oldest}" is not a semantic version`);
  if (acceptsAll(floor)) return undefined;
  const said = parseVersion(agentVersion);
  const upgrade = `this control plane (${serverVersion}) accepts agents from ${oldest} on: upgrade the agent`;
  if (said === undefined) {
    return `agent version "${agentVersion}" is not a semantic version (MAJOR.MINOR.PATCH); ${upgrade}`;
  }
  if (compareVersions(said, floor) < 0) return `agent version ${agentVersion} is older than ${oldest}; ${upgrade}`;
  return undefined;
}

/** For listings: whether a node's recorded agent would be refused at its next Hello (unknown: no). */
export function isAgentOutdated(agentVersion: string | null, oldest: string): boolean {
  if (agentVersion === null || agentVersion === "") return false;
  return agentVersionRefusal(agentVersion, oldest, "") !== undefined;
}
