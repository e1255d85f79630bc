// The web console in a real browser, for the console tests: Debian's Chromium driven by
// playwright-core, the console built as `npm run build:ui` builds it into a directory of the
// test's own, and screenshots kept where CI collects them.
import { existsSync, mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { build } from "vite";
import { generousMs, waitFor } from "./wait.js";

const chromiumPath = process.env.MODELFORGE_CHROMIUM ?? "/usr/bin/chromium";
const root = fileURLToPath(new URL("../..", import.meta.url));

/** The read-only operator key the console tests give their servers. */
export const readOnlyKey = "test-read-only-key-0123456789ab";

/** Throws, saying how to get one, when there is no Chromium: call it before starting anything slow. */
export function requireChromium(): void {
  if (!existsSync(chromiumPath)) throw new Error(`${chromiumPath} not found: apt-get install -y chromium (or set MODELFORGE_CHROMIUM)`);
}

/** The console as `npm run build:ui` builds it, into `outDir`. */
export async function buildConsole(outDir: string): Promise<void> {
  await build({ configFile: join(root, "ui/vite.config.ts"), logLevel: "error", build: { outDir, emptyOutDir: true } });
}

/**
 * Where a suite's screenshots go: CI names a directory to keep (one subdirectory per database run,
 * then the suite's, if named); otherwise a fresh temporary one.
 */
function screenshotDir(suite: string | undefined): string {
  const kept = process.env.MODELFORGE_SCREENSHOT_DIR;
  const dir = kept
    ? join(kept, process.env.MODELFORGE_TEST_DB ?? "pglite", suite ?? "")
    : mkdtempSync(join(tmpdir(), `mf-console-${suite === undefined ? "" : `${suite}-`}shots-`));
  mkdirSync(dir, { recursive: true });
  return dir;
}

export interface ConsoleBrowser {
  context: BrowserContext;
  page: Page;
  /** A full-page screenshot, `name`.png in the suite's directory. */
  shot(name: string): Promise<void>;
  /** The text of the first element with this test id, trimmed. */
  text(testId: string): Promise<string>;
  /** Opens the console and signs in with `key`, waiting for the role it was given. */
  signIn(key: string): Promise<void>;
  /** Waits until `check` holds, re-checked every 200 ms: a busy machine makes a browser slow, not wrong. */
  until(what: string, check: () => Promise<boolean>, timeout?: number): Promise<void>;
  close(): Promise<void>;
}

/** Chromium with a fresh profile under `workDir`, on the console at `url`; screenshots as `suite`'s. */
export async function openConsoleBrowser(url: string, workDir: string, suite?: string): Promise<ConsoleBrowser> {
  const shots = screenshotDir(suite);
  const context = await chromium.launchPersistentContext(join(workDir, "profile"), {
    executablePath: chromiumPath,
    headless: true,
    ignoreHTTPSErrors: true, // the control plane's own CA; the API calls go to the same origin
    args: [
      "--no-sandbox",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
      "--disable-gpu",
    ],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(30_000);
  process.stdout.write(`console screenshots: ${shots}\n`);
  return {
    context,
    page,
    shot: async (name) => {
      await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
    },
    text: async (testId) => ((await page.getByTestId(testId).first().textContent()) ?? "").trim(),
    async signIn(key) {
      await page.goto(`${url}/ui/`);
      await page.getByTestId("key").fill(key);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.getByTestId("role").waitFor();
    },
    until: async (what, check, timeout = generousMs) => {
      await waitFor(async () => (await check()) || undefined, { what, interval: 200, timeout });
    },
    close: () => context.close(),
  };
}
