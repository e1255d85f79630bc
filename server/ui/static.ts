// The web console's files (ui/, built by `npm run build:ui` into ui/dist), served under /ui/ on the
// control plane's TLS port. The build directory is read once at start into a table of exact paths,
// so a request can only ever name one of those files: no path is joined, decoded or resolved
// against the disk, and nothing outside the build directory (nor a symlink in it) is reachable.
import { createHash } from "node:crypto";
import { lstat, readdir, readFile } from "node:fs/promises";
import { extname, join } from "node:path";
import { answerAfterBody, type NodeRequest, type NodeResponse } from "../edge/drain.js";

export const consolePrefix = "/ui/";

interface Asset {
  body: Buffer;
  contentType: string;
  etag: string;
  /** Vite names built assets by content hash: they never change under the same name. */
  immutable: boolean;
}

const contentTypes: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".json": "application/json",
  ".txt": "text/plain; charset=utf-8",
};

/**
 * Scripts, styles and API calls from this origin only; no inline script or style, no framing, no
 * plugins, no form posts elsewhere. The console builds every element with the DOM API. HSTS: the
 * port speaks only TLS, and a browser that has seen the console never tries plain HTTP for the
 * host again nor lets a certificate warning be clicked through (subdomains are not ours to bind).
 */
const securityHeaders: Record<string, string> = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
  "strict-transport-security": "max-age=31536000",
};

/** Every regular file under `dir`, keyed by its URL path under /ui/. */
async function readBuild(dir: string): Promise<Map<string, Asset>> {
  const assets = new Map<string, Asset>();
  const walk = async (rel: string) => {
    for (const entry of await readdir(join(dir, rel), { withFileTypes: true })) {
      const relPath = rel === "" ? entry.name : `${rel}/${entry.name}`;
      if (entry.isDirectory()) await walk(relPath);
      else if (entry.isFile() && (await lstat(join(dir, relPath))).isFile()) {
        const body = await readFile(join(dir, relPath));
        assets.set(consolePrefix + relPath, {
          body,
          contentType: contentTypes[extname(entry.name)] ?? "application/octet-stream",
          etag: `"${createHash("sha256").update(body).digest("base64url").slice(0, 22)}"`,
          immutable: relPath.startsWith("assets/"),
        });
      }
    }
  };
  await walk("");
  return assets;
}

export interface ConsoleFiles {
  /** Whether the build was found (false: /ui/ answers 503 saying how to build it). */
  built: boolean;
  /** Answers a request under /ui and returns true; returns false for every other path. */
  serve(req: NodeRequest, res: NodeResponse): boolean;
}

export async function loadConsole(dir: string): Promise<ConsoleFiles> {
  let assets: Map<string, Asset> | undefined;
  try {
    assets = await readBuild(dir);
    if (!assets.has(`${consolePrefix}index.html`)) assets = undefined;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  return {
    built: assets !== undefined,
    serve(req, res) {
      const path = (req.url ?? "").split("?", 1)[0]!;
      if (path !== "/ui" && !path.startsWith(consolePrefix)) return false;
      // Answered once any body is discarded: see server/edge/drain.ts.
      answerAfterBody(req, res, () => respond(assets, req, res, path));
      return true;
    },
  };
}

function plain(res: NodeResponse, status: number, text: string, extra: Record<string, string> = {}): void {
  res.writeHead(status, { ...securityHeaders, "content-type": "text/plain; charset=utf-8", "cache-control": "no-store", ...extra });
  res.end(`${text}\n`);
}

/** Answers a request under /ui (`assets` undefined: the console was not built). */
function respond(assets: Map<string, Asset> | undefined, req: NodeRequest, res: NodeResponse, path: string): void {
  if (path === "/ui") return plain(res, 308, "moved to /ui/", { location: consolePrefix });
  if (req.method !== "GET" && req.method !== "HEAD") return plain(res, 405, "method not allowed", { allow: "GET, HEAD" });
  if (assets === undefined) return plain(res, 503, "web console not built: run `npm run build:ui` and restart the control plane");
  const asset = assets.get(path === consolePrefix ? `${consolePrefix}index.html` : path);
  if (asset === undefined) return plain(res, 404, "not found");
  const headers = {
    ...securityHeaders,
    "content-type": asset.contentType,
    "content-length": String(asset.body.byteLength),
    etag: asset.etag,
    // The page itself is revalidated every time, so a new build is picked up at once.
    "cache-control": asset.immutable ? "public, max-age=31536000, immutable" : "no-cache",
  };
  if (req.headers["if-none-match"] === asset.etag) {
    const { "content-length": _, ...rest } = headers;
    res.writeHead(304, rest);
    res.end();
    return;
  }
  res.writeHead(200, headers);
  if (req.method === "HEAD") res.end();
  else res.end(asset.body);
}
