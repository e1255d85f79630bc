// `modelforge-agent update-prepare`: run before every start of the service (the unit's
// ExecStartPre=), by the installed agent, which an update never replaces. It makes sure the
// `current` link exists, and rolls a pending update back when the new agent used up its starts or
// its deadline: `current` points at the previous agent again and the next Hello reports why.
import { lstat, mkdir, rm } from "node:fs/promises";
import { pointCurrent, readJson, writeJson, type PendingUpdate, type UpdateLayout, type UpdateReport } from "./layout.js";
import { startDecision, type StartDecision } from "./rules.js";

export async function prepareStart(layout: UpdateLayout, installedDir: string, now: number): Promise<StartDecision> {
  await mkdir(layout.dir, { recursive: true, mode: 0o700 });
  const linked = await lstat(layout.current).then(
    () => true,
    () => false,
  );
  if (!linked) await pointCurrent(layout, installedDir);
  const pending = await readJson<PendingUpdate>(layout.pending);
  const decision = startDecision(pending, now);
  if (pending === undefined || decision.kind === "run") return decision;
  if (decision.kind === "try") {
    await writeJson(layout.pending, { ...pending, attempts: decision.attempts });
    return decision;
  }
  await pointCurrent(layout, pending.previous);
  const report: UpdateReport = { rolloutId: pending.rolloutId, version: pending.version, succeeded: false, reason: decision.reason };
  await writeJson(layout.report, report);
  await rm(layout.pending, { force: true });
  return decision;
}
