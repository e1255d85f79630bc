// Which file of a commit a runtime loads. One rule for the control plane (over the commit's paths,
// when a deployment is created or changes revision) and the agent (over a lease's resolved paths,
// when an older server sent no model file): a commit may hold a README, a config and several
// quantisations, and "the first file" would load whichever sorts first.

/** How many file names a refusal lists before "and N more": the message stays short. */
const LISTED = 5;

export type ModelFileChoice = { ok: true; path: string } | { ok: false; problem: string };

const isGguf = (path: string) => path.toLowerCase().endsWith(".gguf");

/** The first few of `paths`, quoted, and how many more: bounded whatever the commit holds. */
function listPaths(paths: readonly string[]): string {
  const shown = paths.slice(0, LISTED).map((p) => JSON.stringify(p));
  const more = paths.length - shown.length;
  return more > 0 ? `${shown.join(", ")} and ${more} more` : shown.join(", ");
}

/**
 * The file to load among `paths`: `named` when given (it must be one of them); else the single
 * .gguf file; else, with no .gguf at all, the single file (an engine that takes another format).
 */
export function chooseModelFile(paths: readonly string[], named: string): ModelFileChoice {
  if (named !== "") {
    if (paths.includes(named)) return { ok: true, path: named };
    return { ok: false, problem: `${JSON.stringify(named)} is not a file of the commit, which holds ${listPaths(paths)}` };
  }
  const ggufs = paths.filter(isGguf);
  if (ggufs.length === 1) return { ok: true, path: ggufs[0]! };
  if (ggufs.length > 1) {
    return { ok: false, problem: `the commit holds ${ggufs.length} .gguf files (${listPaths(ggufs)}); name the one to load` };
  }
  if (paths.length === 1) return { ok: true, path: paths[0]! };
  if (paths.length === 0) return { ok: false, problem: "the commit holds no files" };
  return {
    ok: false,
    problem: `the commit holds no .gguf file among its ${paths.length} files (${listPaths(paths)}); name the one to load`,
  };
}
