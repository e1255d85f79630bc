// The agent's self-update rules as tables, and the start-time rollback on real files: a pending
// update is tried a bounded number of times within its deadline, then `current` points back at
// the previous agent and a report waits for the next Hello.
import { describe, expect, it } from "vitest";
import { mkdtempSync, readFileSync, readlinkSync, existsSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { contentRefusal, MAX_UPDATE_ATTEMPTS, startDecision, versionRefusal } from "../../agent/update/rules.js";
import { pointCurrent, updateLayout, writeJson, type PendingUpdate } from "../../agent/update/layout.js";
import { prepareStart } from "../../agent/update/prepare.js";

const pending = (over: Partial<PendingUpdate> = {}): PendingUpdate => ({
  rolloutId: "r",
  version: "0.2.0",
  previous: "/old",
  attempts: 0,
  deadlineAt: 10_000,
  ...over,
});

describe("at a start", () => {
  it.each<[string, PendingUpdate | undefined, number, ReturnType<typeof startDecision>]>([
    ["runs when nothing is pending", undefined, 0, { kind: "run" }],
    ["tries a new agent", pending(), 0, { kind: "try", attempts: 1 }],
    ["tries again after a crash", pending({ attempts: MAX_UPDATE_ATTEMPTS - 1 }), 0, { kind: "try", attempts: MAX_UPDATE_ATTEMPTS }],
    [
      "rolls back after the last attempt",
      pending({ attempts: MAX_UPDATE_ATTEMPTS }),
      0,
      { kind: "roll back", reason: `rolled back: 0.2.0 exited ${MAX_UPDATE_ATTEMPTS} times before a healthy session` },
    ],
    [
      "rolls back after the deadline",
      pending({ attempts: 1 }),
      10_000,
      { kind: "roll back", reason: "rolled back: 0.2.0 did not reach a healthy session by its deadline" },
    ],
  ])("%s", (_name, p, now, want) => expect(startDecision(p, now)).toEqual(want));
});

describe("before a swap", () => {
  const want = { sha256: "a".repeat(64), sizeBytes: 10 };
  it.each<[string, { sha256: string; sizeBytes: number; signatureValid: boolean | undefined }, string | undefined]>([
    ["takes matching bytes", { ...want, signatureValid: undefined }, undefined],
    ["takes matching signed bytes", { ...want, signatureValid: true }, undefined],
    ["refuses a short download", { ...want, sizeBytes: 9, signatureValid: undefined }, "refused: downloaded 9 bytes, the release has 10"],
    ["refuses another digest", { ...want, sha256: "b".repeat(64), signatureValid: undefined }, "refused: digest mismatch"],
    ["refuses a bad signature", { ...want, signatureValid: false }, "refused: the signature does not verify"],
  ])("%s", (_name, got, refusal) => {
    const r = contentRefusal(want, got);
    if (refusal === undefined) expect(r).toBeUndefined();
    else expect(r).toContain(refusal);
  });
  it("wants the file to say the version it was released as", () => {
    expect(versionRefusal("0.2.0", "0.2.0")).toBeUndefined();
    expect(versionRefusal("0.2.0", "0.1.0")).toBe('refused: the file reports version "0.1.0", not 0.2.0');
    expect(versionRefusal("0.2.0", undefined)).toBe("refused: the file reports version nothing, not 0.2.0");
  });
});

describe("update-prepare on real files", () => {
  it("links the installed agent first, then rolls a failing update back with a report", async () => {
    const root = mkdtempSync(join(tmpdir(), "mf-prepare-"));
    const layout = updateLayout(join(root, "state.json"));
    const installed = join(root, "installed");
    const release = join(root, "release");
    mkdirSync(installed);
    mkdirSync(release);
    expect(await prepareStart(layout, installed, 0)).toEqual({ kind: "run" });
    expect(readlinkSync(layout.current)).toBe(installed);
    // An update swapped in: `current` at the release, the installed agent as its previous.
    await writeJson(layout.pending, pending({ previous: installed }));
    await pointCurrent(layout, release);
    for (let i = 1; i <= MAX_UPDATE_ATTEMPTS; i++) expect(await prepareStart(layout, installed, 0)).toEqual({ kind: "try", attempts: i });
    expect(readlinkSync(layout.current)).toBe(release);
    expect((await prepareStart(layout, installed, 0)).kind).toBe("roll back");
    expect(readlinkSync(layout.current)).toBe(installed);
    expect(existsSync(layout.pending)).toBe(false);
    expect(JSON.parse(readFileSync(layout.report, "utf8"))).toMatchObject({ rolloutId: "r", version: "0.2.0", succeeded: false });
  });
});
