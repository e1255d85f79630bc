// A loopback HTTP mirror with the Hugging Face layout (`/<org>/<name>/resolve/<commit>/<path>`),
// for artifact tests and the acquire benchmark. It honours Range, records every request, and can
// misbehave per file: corrupt a byte, serve a truncated file, drop the connection halfway (once),
// or trickle bytes slowly.
import http from "node:http";
import { createReadStream } from "node:fs";
import type { AddressInfo } from "node:net";

export interface MirrorFile {
  /** The content, in memory or as a file on disk (for large artifacts). */
  content: Buffer | { path: string; size: number };
  /** Flip the byte at this offset in what is served. */
  corruptAt?: number;
  /** Serve only this many bytes (a consistent, shorter file). */
  truncateTo?: number;
  /** On the first request only: send full headers, then cut the connection after this many bytes. */
  dropAfter?: number;
  /** Pause this long between 64 KiB pieces. */
  delayMs?: number;
  /** Served in pieces, counting here each time the mirror must wait for the client to read on. */
  flow?: MirrorFlow;
}

/** How a response went out: how often the client's reading held the mirror back, and whether all was written. */
export interface MirrorFlow {
  stalls: number;
  written: boolean;
}

export interface MirrorRequest {
  path: string;
  range: string | undefined;
  authorization: string | undefined;
  /** The request's Connection header: "close" from the agent's own client, "keep-alive" from node:http's. */
  connection: string | undefined;
}

export interface Mirror {
  url: string;
  requests: MirrorRequest[];
  /** Adds (or replaces) a file under `<repository>/resolve/<commit>/<path>`. */
  put(repository: string, commit: string, path: string, file: MirrorFile): void;
  close(): Promise<void>;
}

const PIECE = 64 * 1024;

export async function startMirror(): Promise<Mirror> {
  const files = new Map<string, MirrorFile & { dropped?: boolean }>();
  const requests: MirrorRequest[] = [];
  const server = http.createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
    requests.push({ path, range: req.headers.range, authorization: req.headers.authorization, connection: req.headers.connection });
    const file = files.get(path);
    if (file === undefined) {
      res.writeHead(404).end();
      return;
    }
    const fullSize = Buffer.isBuffer(file.content) ? file.content.length : file.content.size;
    const size = file.truncateTo ?? fullSize;
    let start = 0;
    const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
    if (m !== null) {
      start = Number(m[1]);
      if (start >= size) {
        res.writeHead(416, { "content-range": `bytes */${size}` }).end();
        return;
      }
      res.writeHead(206, { "content-length": size - start, "content-range": `bytes ${start}-${size - 1}/${size}` });
    } else res.writeHead(200, { "content-length": size });
    const drop = file.dropAfter !== undefined && !file.dropped ? file.dropAfter : undefined;
    if (drop !== undefined) file.dropped = true;
    if (Buffer.isBuffer(file.content) && file.delayMs === undefined && drop === undefined && file.corruptAt === undefined && !file.flow) {
      res.end(file.content.subarray(start, size));
      return;
    }
    if (!Buffer.isBuffer(file.content)) {
      createReadStream(file.content.path, { start, end: size - 1, highWaterMark: 1 << 20 }).pipe(res);
      return;
    }
    const body = Buffer.from(file.content.subarray(0, size));
    if (file.corruptAt !== undefined) body[file.corruptAt] = body[file.corruptAt]! ^ 0xff;
    let at = start;
    const next = () => {
      if (res.destroyed) return;
      if (drop !== undefined && at >= drop) {
        res.socket?.destroy();
        return;
      }
      const end = Math.min(size, at + PIECE, drop ?? size);
      const ok = res.write(body.subarray(at, end));
      at = end;
      if (at >= size) {
        res.end();
        if (file.flow) file.flow.written = true;
        return;
      }
      const go = () => (file.delayMs ? setTimeout(next, file.delayMs) : setImmediate(next));
      if (ok) return go();
      if (file.flow) file.flow.stalls++;
      res.once("drain", go);
    };
    next();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    put(repository, commit, path, file) {
      files.set(`/${repository}/resolve/${commit}/${path}`, file);
    },
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
