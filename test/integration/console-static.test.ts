// The web console's files over the real TLS port: exact paths from the build directory only (no
// traversal, no symlink out), sound headers (CSP, nosniff, HSTS, caching), and a clear 503 when the
// console was never built.
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.js";
import { connect } from "../support/raw-call.js";

const secret = "outside-the-build-dir-0123456789";
let root: string;
let ts: TestServer;
let session: http2.ClientHttp2Session;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "mf-console-"));
  const dist = join(root, "dist");
  mkdirSync(join(dist, "assets"), { recursive: true });
  writeFileSync(join(dist, "index.html"), "<!doctype html><title>console</title>");
  writeFileSync(join(dist, "assets", "index-abc123.js"), "console.log(1)");
  writeFileSync(join(root, "secret.txt"), secret);
  symlinkSync(join(root, "secret.txt"), join(dist, "link.txt"));
  symlinkSync(root, join(dist, "up"));
  ts = await startTestServer({ MODELFORGE_UI_DIR: dist });
  session = await connect(ts.url, ts.caPem);
});
afterAll(async () => {
  session?.destroy();
  await ts?.stop();
  rmSync(root, { recursive: true, force: true });
});

interface Got {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: string;
}

function get(s: http2.ClientHttp2Session, path: string, headers: Record<string, string> = {}, method = "GET", body?: string): Promise<Got> {
  return new Promise((resolve, reject) => {
    const req = s.request({ ":method": method, ":path": path, ...headers });
    let text = "";
    let head: http2.IncomingHttpHeaders = {};
    req.on("response", (h) => (head = h));
    req.on("data", (c: Buffer) => (text += c.toString()));
    req.on("end", () => resolve({ status: Number(head[":status"]), headers: head, body: text }));
    req.on("error", reject);
    if (body !== undefined) req.end(body);
    else req.end();
  });
}

describe("the console's files", () => {
  it("serves the page with a strict CSP, nosniff, no-cache and an ETag (304 when unchanged)", async () => {
    const r = await get(session, "/ui/");
    expect(r.status).toBe(200);
    expect(r.body).toContain("<title>console</title>");
    expect(r.headers["content-type"]).toBe("text/html; charset=utf-8");
    expect(r.headers["content-security-policy"]).toMatch(/default-src 'none'; script-src 'self'; style-src 'self'/);
    expect(r.headers["content-security-policy"]).toMatch(/frame-ancestors 'none'/);
    expect(r.headers["content-security-policy"]).not.toMatch(/unsafe-inline|unsafe-eval/);
    expect(r.headers["x-content-type-options"]).toBe("nosniff");
    expect(r.headers["x-frame-options"]).toBe("DENY");
    expect(r.headers["referrer-policy"]).toBe("no-referrer");
    expect(r.headers["strict-transport-security"]).toBe("max-age=31536000");
    expect(r.headers["cache-control"]).toBe("no-cache");
    expect((await get(session, "/ui/index.html")).body).toBe(r.body);
    const again = await get(session, "/ui/", { "if-none-match": String(r.headers.etag) });
    expect(again.status).toBe(304);
    expect(again.body).toBe("");
  });

  it("caches content-hashed assets for a year", async () => {
    const r = await get(session, "/ui/assets/index-abc123.js");
    expect(r.status).toBe(200);
    expect(r.headers["content-type"]).toBe("text/javascript; charset=utf-8");
    expect(r.headers["cache-control"]).toBe("public, max-age=31536000, immutable");
    expect(r.headers["x-content-type-options"]).toBe("nosniff");
    expect(r.headers["strict-transport-security"]).toBe("max-age=31536000");
  });

  it("redirects /ui to /ui/ and refuses methods other than GET and HEAD", async () => {
    const r = await get(session, "/ui");
    expect(r.status).toBe(308);
    expect(r.headers.location).toBe("/ui/");
    expect((await get(session, "/ui/", {}, "POST")).status).toBe(405);
    const head = await get(session, "/ui/", {}, "HEAD");
    expect(head.status).toBe(200);
    expect(head.body).toBe("");
  });

  it.each([
    "/ui/../secret.txt",
    "/ui/assets/../../secret.txt",
    "/ui/%2e%2e/secret.txt",
    "/ui/..%2fsecret.txt",
    "/ui/%2e%2e%2f%2e%2e%2fsecret.txt",
    "/ui/link.txt",
    "/ui/up/secret.txt",
    "/ui//etc/passwd",
    "/ui/..\\secret.txt",
    "/ui/assets/",
    "/ui/nonexistent.js",
  ])("answers 404 for %s, never a file outside the build", async (path) => {
    const r = await get(session, path);
    expect(r.status).toBe(404);
    expect(r.body).not.toContain(secret);
    expect(r.headers["x-content-type-options"]).toBe("nosniff");
    expect(r.headers["strict-transport-security"]).toBe("max-age=31536000");
  });

  it("leaves every other path to the API", async () => {
    const r = await get(session, "/modelforge.agent.v1.AgentService/GetServerInfo", { "content-type": "application/json" }, "POST", "{}");
    expect(r.status).toBe(200);
  });
});

describe("without a build", () => {
  it("answers 503 saying how to build it, and logs it once at start", async () => {
    const bare = await startTestServer({ MODELFORGE_UI_DIR: join(root, "no-such-dir") });
    const s = await connect(bare.url, bare.caPem);
    try {
      const r = await get(s, "/ui/");
      expect(r.status).toBe(503);
      expect(r.body).toMatch(/npm run build:ui/);
      expect(bare.logs()).toMatch(/web console not built/);
    } finally {
      s.destroy();
      await bare.stop();
    }
  });
});
