// Where artifact.acquire.v1 fetches from: agent configuration, never lease content. An HTTP(S)
// mirror with the Hugging Face layout `<base>/<repository>/resolve/<commit>/<path>` (optionally
// with a bearer token read from a file), or the control plane's own artifact store over the
// agent's mTLS connection. Each source opens one file from a byte offset; the handler tries them
// in order and moves on when one is unavailable or lacks the file.
import http from "node:http";
import https from "node:https";
import { readFile } from "node:fs/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import { onAbort } from "../../common/abort.js";
import type { AgentClient } from "../session/transport.js";
import { plainGet, type MirrorResponse } from "./mirror-http.js";

/** What went wrong at one source: "unavailable" is worth another source or attempt. */
export class SourceError extends Error {
  override readonly name = "SourceError";
  constructor(
    readonly kind: "unavailable" | "not_found",
    message: string,
  ) {
    super(message);
  }
}

export interface FileRequest {
  repository: string;
  commit: string;
  /** Relative path, already checked by the path rules. */
  path: string;
  /** First byte wanted. */
  offset: number;
  signal: AbortSignal;
}

export interface SourceBody {
  /** Where the body starts: the requested offset, or 0 when the source sends the whole file. */
  start: number;
  /** The whole file's size as the source states it, when it does. */
  totalSize: number | undefined;
  chunks: AsyncIterable<Uint8Array>;
  /** Releases the connection when the body is abandoned. */
  close(): void;
}

export interface ArtifactSource {
  /** For results and logs: "control-plane" or "mirror:<host>"; never a credential. */
  readonly label: string;
  open(req: FileRequest): Promise<SourceBody>;
}

/** A source as written in the agent's configuration. */
export type SourceConfig = { kind: "mirror"; baseUrl: string; tokenFile?: string } | { kind: "control-plane" };

export class SourceConfigError extends Error {
  override readonly name = "SourceConfigError";
}

/**
 * Parses MODELFORGE_AGENT_ARTIFACT_SOURCES: a comma-separated list, tried in order, of
 * `control-plane` and `http(s)://base` entries; a mirror may add `;token-file=/abs/path`.
 */
export function parseSourceList(text: string): SourceConfig[] {
  const sources: SourceConfig[] = [];
  for (const raw of text.split(",")) {
    const entry = raw.trim();
    if (entry === "") continue;
    if (entry === "control-plane") {
      if (sources.some((s) => s.kind === "control-plane")) throw new SourceConfigError("control-plane is listed twice");
      sources.push({ kind: "control-plane" });
      continue;
    }
    const [base, ...options] = entry.split(";");
    let url: URL;
    try {
      url = new URL(base!);
    } catch {
      throw new SourceConfigError(`"${base}" is neither control-plane nor an http(s) URL`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:")
      throw new SourceConfigError(`mirror ${url.host}: only http and https are supported`);
    if (url.username !== "" || url.password !== "")
      throw new SourceConfigError(`mirror ${url.host}: put credentials in a token file, not in the URL`);
    if (url.search !== "" || url.hash !== "") throw new SourceConfigError(`mirror ${url.host}: the base URL takes no query or fragment`);
    const source: SourceConfig = { kind: "mirror", baseUrl: url.href.replace(/\/+$/, "") };
    for (const option of options) {
      const m = /^token-file=(\/.+)$/.exec(option.trim());
      if (m === null) throw new SourceConfigError(`mirror ${url.host}: unknown option (expected token-file=/absolute/path)`);
      source.tokenFile = m[1]!;
    }
    sources.push(source);
  }
  return sources;
}

/** The mirror URL of one file: every segment percent-encoded, so a path cannot change the route. */
export function mirrorUrl(baseUrl: string, repository: string, commit: string, path: string): string {
  const enc = (p: string) => p.split("/").map(encodeURIComponent).join("/");
  return `${baseUrl}/${enc(repository)}/resolve/${commit}/${enc(path)}`;
}

/** Parses `Content-Range: bytes START-END/TOTAL`. */
export function parseContentRange(value: string | undefined): { start: number; total: number | undefined } | undefined {
  const m = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(value ?? "");
  if (m === null) return undefined;
  return { start: Number(m[1]), total: m[3] === "*" ? undefined : Number(m[3]) };
}

const MAX_REDIRECTS = 5;
/** A mirror that sends nothing for this long is given up on (and resumed from elsewhere). */
const IDLE_TIMEOUT_MS = 30_000;
const keepAlive = { http: new http.Agent({ keepAlive: true }), https: new https.Agent({ keepAlive: true }) };

export class MirrorSource implements ArtifactSource {
  readonly label: string;

  constructor(
    /** `plainHttp` false: every download through node:http (MODELFORGE_AGENT_MIRROR_FAST_PATH=off). */
    private readonly config: { baseUrl: string; tokenFile?: string; plainHttp?: boolean },
    private readonly idleTimeoutMs = IDLE_TIMEOUT_MS,
  ) {
    this.label = `mirror:${new URL(config.baseUrl).host}`;
  }

  async open(req: FileRequest): Promise<SourceBody> {
    // Read per request, so a rotated token is picked up without a restart.
    const token = this.config.tokenFile === undefined ? undefined : await this.readToken();
    let url = new URL(mirrorUrl(this.config.baseUrl, req.repository, req.commit, req.path));
    const origin = url.origin;
    let offset = req.offset;
    for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
      const headers: Record<string, string> = { "user-agent": "modelforge-agent" };
      if (offset > 0) headers.range = `bytes=${offset}-`;
      // The token goes to the configured mirror only, never to where it redirects.
      if (token !== undefined && url.origin === origin) headers.authorization = `Bearer ${token}`;
      const res = await this.get(url, headers, req.signal);
      const status = res.status;
      if (status >= 300 && status < 400 && res.location !== undefined) {
        res.discard();
        const next = new URL(res.location, url);
        if (next.protocol !== "https:" && !(next.protocol === "http:" && url.protocol === "http:")) {
          throw new SourceError("unavailable", `${this.label}: refused a redirect to ${next.protocol}`);
        }
        url = next;
        continue;
      }
      if (status === 416 && offset > 0) {
        // Our partial file is longer than the mirror's: start over from the beginning.
        res.discard();
        offset = 0;
        hop--;
        continue;
      }
      if (status === 404) {
        res.discard();
        throw new SourceError("not_found", `${this.label}: file not found (404)`);
      }
      if (status !== 200 && status !== 206) {
        res.discard();
        throw new SourceError("unavailable", `${this.label}: answered ${status}`);
      }
      let start = 0;
      let totalSize = status === 200 ? res.contentLength : undefined;
      if (status === 206) {
        const range = parseContentRange(res.contentRange);
        if (range === undefined) {
          res.close();
          throw new SourceError("unavailable", `${this.label}: a partial answer without a valid Content-Range`);
        }
        start = range.start;
        totalSize = range.total;
      }
      return { start, totalSize, chunks: res.body, close: () => res.close() };
    }
    throw new SourceError("unavailable", `${this.label}: more than ${MAX_REDIRECTS} redirects`);
  }

  private async readToken(): Promise<string> {
    try {
      const token = (await readFile(this.config.tokenFile!, "utf8")).trim();
      if (token === "") throw new Error("empty");
      return token;
    } catch {
      // Which file, never its content.
      throw new SourceError("unavailable", `${this.label}: the token file ${this.config.tokenFile} cannot be read or is empty`);
    }
  }

  private async get(url: URL, headers: Record<string, string>, signal: AbortSignal): Promise<MirrorResponse> {
    try {
      if (url.protocol === "http:" && this.config.plainHttp !== false) {
        const fast = await plainGet(url, headers, signal, this.idleTimeoutMs);
        if (fast !== "unsupported") return fast;
      }
      return await this.nodeGet(url, headers, signal);
    } catch (err) {
      if (signal.aborted) throw signal.reason;
      throw new SourceError("unavailable", `${this.label}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  }

  /** https, and bodies not framed by Content-Length, through node:http. */
  private nodeGet(url: URL, headers: Record<string, string>, signal: AbortSignal): Promise<MirrorResponse> {
    return new Promise((resolve, reject) => {
      const lib = url.protocol === "https:" ? https : http;
      const req = lib.get(url, { headers, signal, agent: url.protocol === "https:" ? keepAlive.https : keepAlive.http }, (res) => {
        res.setTimeout(this.idleTimeoutMs, () => res.destroy(new Error(`no data for ${this.idleTimeoutMs} ms`)));
        const length = res.headers["content-length"];
        resolve({
          status: res.statusCode ?? 0,
          location: res.headers.location,
          contentLength: length === undefined ? undefined : Number(length),
          contentRange: res.headers["content-range"],
          body: res,
          // Read to its end, so the kept-alive connection can serve the next request.
          discard: () => res.resume(),
          close: () => res.destroy(),
        });
      });
      req.setTimeout(this.idleTimeoutMs, () => req.destroy(new Error(`no answer for ${this.idleTimeoutMs} ms`)));
      req.on("error", reject);
    });
  }
}

/** The control plane's artifact store, over the agent's own mTLS connection. */
export class ControlPlaneSource implements ArtifactSource {
  readonly label = "control-plane";

  /** `client` is called per file, so a renewed certificate is used once it is on disk. */
  constructor(private readonly client: () => Promise<AgentClient>) {}

  async open(req: FileRequest): Promise<SourceBody> {
    const client = await this.client();
    const stop = new AbortController();
    // The request may have been aborted while the client was being made.
    const forgetAbort = onAbort(req.signal, () => stop.abort(req.signal.reason));
    const stream = client.downloadArtifactFile(
      { repository: req.repository, commit: req.commit, path: req.path, offset: BigInt(req.offset) },
      { signal: stop.signal },
    );
    const it = stream[Symbol.asyncIterator]();
    let first: IteratorResult<{ sizeBytes: bigint; data: Uint8Array }>;
    try {
      first = await it.next();
    } catch (err) {
      forgetAbort();
      if (req.signal.aborted) throw req.signal.reason;
      const ce = ConnectError.from(err);
      if (ce.code === Code.NotFound) throw new SourceError("not_found", `${this.label}: ${ce.rawMessage}`);
      throw new SourceError("unavailable", `${this.label}: ${ce.rawMessage}`);
    }
    if (first.done) throw new SourceError("unavailable", `${this.label}: empty answer`);
    const head = first.value;
    async function* chunks(): AsyncGenerator<Uint8Array> {
      try {
        if (head.data.byteLength > 0) yield head.data;
        for (;;) {
          const next = await it.next();
          if (next.done) return;
          yield next.value.data;
        }
      } finally {
        forgetAbort();
      }
    }
    return { start: req.offset, totalSize: Number(head.sizeBytes), chunks: chunks(), close: () => stop.abort() };
  }
}
