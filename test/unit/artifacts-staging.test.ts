// Staging of abandoned acquisitions is swept: a staging directory under `<root>/.partial/` that
// has not changed for longer than the configured age, and that no running job owns, is removed,
// at start and then periodically; nothing outside it is touched, and no link is followed.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { existsSync, lstatSync, lutimesSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { ManualClock } from "../../common/clock.js";
import { STAGING_DIR } from "../../agent/capabilities/artifact-acquire.js";
import { isAbandoned, runStagingSweeper, sweepStaging } from "../../agent/capabilities/staging-sweeper.js";

const hour = 3_600_000;
let base: string;
let root: string;
let now: number;

/** A staging directory with one file, everything last changed `ageMs` ago. */
function staged(jobId: string, ageMs: number, at = root): string {
  const dir = join(at, STAGING_DIR, jobId);
  mkdirSync(join(dir, "sub"), { recursive: true });
  writeFileSync(join(dir, "sub", "model.bin"), "partial bytes");
  const t = (now - ageMs) / 1000;
  for (const p of [join(dir, "sub", "model.bin"), join(dir, "sub"), dir]) utimesSync(p, t, t);
  return dir;
}

beforeEach(() => {
  base = mkdtempSync(join(tmpdir(), "mf-staging-"));
  root = join(base, "root");
  mkdirSync(root);
  now = Date.now();
});
afterEach(() => rmSync(base, { recursive: true, force: true }));

describe("abandoned staging", () => {
  it.each([
    [0, 1000, false],
    [1000, 1000, false],
    [1001, 1000, true],
  ])("idle %i ms with max age %i ms is abandoned: %s", (idle, maxAge, expected) => {
    expect(isAbandoned(now - idle, now, maxAge)).toBe(expected);
  });

  it("removes only old staging that no running job owns", async () => {
    const old = staged("job-old", 25 * hour);
    const fresh = staged("job-fresh", hour);
    const running = staged("job-running", 25 * hour);
    // One recent file is enough to keep a directory: a retry may be about to resume it.
    const touched = staged("job-touched", 25 * hour);
    writeFileSync(join(touched, "sub", "next.bin"), "new");
    const swept = await sweepStaging({ roots: [root], maxAgeMs: 24 * hour, now, active: new Set(["job-running"]) });
    expect(swept.map((s) => s.jobId)).toEqual(["job-old"]);
    expect(swept[0]!.idleMs).toBeGreaterThan(24 * hour);
    expect(existsSync(old)).toBe(false);
    for (const kept of [fresh, running, touched]) expect(existsSync(kept)).toBe(true);
  });

  it("follows no link and touches nothing but the agent's own staging directories", async () => {
    const outside = join(base, "outside");
    mkdirSync(outside);
    writeFileSync(join(outside, "precious"), "keep me");
    const t = (now - 48 * hour) / 1000;
    utimesSync(outside, t, t);
    // A link in .partial to an old directory elsewhere: not ours, not followed.
    mkdirSync(join(root, STAGING_DIR));
    symlinkSync(outside, join(root, STAGING_DIR, "job-link"));
    // A file and a hidden name in .partial: never created by an acquisition.
    writeFileSync(join(root, STAGING_DIR, "job-file"), "x");
    const hidden = staged(".hidden", 48 * hour);
    // An old staging directory holding a link out: the directory goes, the link's target stays.
    const withLink = staged("job-with-link", 48 * hour);
    symlinkSync(join(outside, "precious"), join(withLink, "sub", "escape"));
    lutimesSync(join(withLink, "sub", "escape"), t, t);
    utimesSync(join(withLink, "sub"), t, t);
    await sweepStaging({ roots: [root], maxAgeMs: 24 * hour, now, active: new Set() });
    expect(existsSync(withLink)).toBe(false);
    expect(lstatSync(join(root, STAGING_DIR, "job-link")).isSymbolicLink()).toBe(true);
    expect(existsSync(join(root, STAGING_DIR, "job-file"))).toBe(true);
    expect(existsSync(hidden)).toBe(true);
    expect(existsSync(join(outside, "precious"))).toBe(true);
  });

  it("skips a root whose .partial is a link, and a root that is a link", async () => {
    const elsewhere = join(base, "elsewhere");
    const victim = staged("job-victim", 48 * hour, elsewhere);
    symlinkSync(join(elsewhere, STAGING_DIR), join(root, STAGING_DIR));
    const linkedRoot = join(base, "linked-root");
    symlinkSync(elsewhere, linkedRoot);
    expect(await sweepStaging({ roots: [root, linkedRoot, join(base, "missing")], maxAgeMs: hour, now, active: new Set() })).toEqual([]);
    expect(existsSync(victim)).toBe(true);
  });

  it("sweeps at start and again after each interval, on the injected clock", async () => {
    const clock = new ManualClock(now);
    const stop = new AbortController();
    const first = staged("job-first", 3 * hour);
    const later = staged("job-later", hour);
    const loop = runStagingSweeper({
      roots: [root],
      maxAgeMs: 2 * hour,
      intervalMs: hour,
      active: new Set(),
      clock,
      log: pino({ level: "silent" }),
      signal: stop.signal,
    });
    await expect.poll(() => existsSync(first)).toBe(false);
    expect(existsSync(later)).toBe(true);
    await expect.poll(() => clock.sleeping).toBe(1);
    await clock.tick(hour + 1000);
    expect(existsSync(later)).toBe(false);
    stop.abort();
    await loop;
  });
});
