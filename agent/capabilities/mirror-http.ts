// A plain-HTTP GET for mirror downloads that reads the socket straight into pooled 1 MiB buffers
// and hands on whole buffers. node:http allocates a buffer per 64 KiB read, copies each once more
// in its parser and passes it through a stream and a promise: on the loopback mirror that cost the
// agent more CPU than hashing the bytes. Only what a file download needs is handled here: one
// request per connection and a Content-Length body; any other framing (chunked) answers
// "unsupported" and the caller asks again through node:http.
import net from "node:net";
import { onAbort } from "../../common/abort.js";
import { takeBuffer } from "./buffer-pool.js";
import { dialHost } from "../../common/url-host.js";

/** An answer's status, the headers a download uses, and its body. */
export interface MirrorResponse {
  status: number;
  location: string | undefined;
  contentLength: number | undefined;
  contentRange: string | undefined;
  body: AsyncIterable<Uint8Array>;
  /** Not interested in the body (a redirect, an error answer). */
  discard(): void;
  /** Abandons the body and its connection. */
  close(): void;
}

const MAX_HEAD_BYTES = 64 * 1024;
/** Whole buffers waiting for the reader before the socket stops reading. */
const MAX_QUEUED = 4;
const HEAD_END = Buffer.from("\r\n\r\n");

/** The request's head; values come from our own code and a token file, so they are checked. */
function requestHead(url: URL, headers: Record<string, string>): string {
  let head = `GET ${url.pathname}${url.search} HTTP/1.1\r\nhost: ${url.host}\r\nconnection: close\r\n`;
  for (const [name, value] of Object.entries(headers)) {
    if (/[\r\n\0]/.test(value)) throw new Error(`the ${name} header holds a line break`);
    head += `${name}: ${value}\r\n`;
  }
  return `${head}\r\n`;
}

/** Status and headers (lower-case names; a repeated header keeps its first value but for Content-Length). */
function parseHead(text: string): { status: number; headers: Map<string, string> } | undefined {
  const lines = text.split("\r\n");
  const m = /^HTTP\/1\.[01] (\d{3})(?: |$)/.exec(lines[0]!);
  if (m === null) return undefined;
  const headers = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    if (colon <= 0) return undefined;
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    const prior = headers.get(name);
    // Two different lengths could make us and a proxy frame the body differently.
    if (name === "content-length" && prior !== undefined && prior !== value) return undefined;
    if (prior === undefined) headers.set(name, value);
  }
  return { status: Number(m[1]), headers };
}

/** GETs `url` (http: only); "unsupported" when the body is not framed by Content-Length. */
export function plainGet(
  url: URL,
  headers: Record<string, string>,
  signal: AbortSignal,
  idleMs: number,
): Promise<MirrorResponse | "unsupported"> {
  return new Promise((resolve, reject) => {
    const head = requestHead(url, headers);
    let cur = takeBuffer();
    let fill = 0;
    let answered = false;
    /** Body bytes still expected; -1 until the head is read. */
    let left = -1;
    let finished = false;
    let failed: Error | undefined;
    let paused = false;
    const queue: Uint8Array[] = [];
    let wake: (() => void) | undefined;
    // Where reads go once the body is complete: nothing after it is used.
    const spill = Buffer.allocUnsafe(4096);

    const fail = (err: Error) => {
      // What arrived of the body is handed on, so a resume starts after it, not at the slot's start.
      if (left >= 0 && fill > 0 && cur !== spill) {
        queue.push(cur.subarray(0, fill));
        cur = spill;
        fill = 0;
      }
      failed ??= err;
      if (!answered) {
        answered = true;
        reject(err);
      }
      wake?.();
    };
    /** `got` new body bytes end at `fill`; whole buffers (and the last) are queued for the reader. */
    const bodyBytes = (got: number): boolean => {
      if (got > left) {
        fill -= got;
        fail(new Error("the mirror sent more than its Content-Length"));
        socket.destroy();
        return false;
      }
      left -= got;
      if (fill > 0 && (left === 0 || fill === cur.length)) {
        queue.push(cur.subarray(0, fill));
        cur = left === 0 ? spill : takeBuffer();
        fill = 0;
        wake?.();
      }
      if (left === 0) {
        finished = true;
        wake?.();
        process.nextTick(() => socket.destroy());
        return false;
      }
      if (queue.length >= MAX_QUEUED) paused = true;
      return !paused;
    };
    const onHead = (): boolean => {
      const end = cur.subarray(0, fill).indexOf(HEAD_END);
      if (end < 0) {
        if (fill < MAX_HEAD_BYTES) return true;
        fail(new Error("the mirror's answer head is too long"));
        socket.destroy();
        return false;
      }
      const parsed = parseHead(cur.toString("latin1", 0, end));
      if (parsed === undefined) {
        fail(new Error("the mirror's answer is not valid HTTP/1.1"));
        socket.destroy();
        return false;
      }
      const { status, headers: h } = parsed;
      const length = h.get("content-length");
      const streamed = status === 200 || status === 206;
      if (streamed && (h.has("transfer-encoding") || length === undefined || !/^\d+$/.test(length))) {
        answered = true;
        socket.destroy();
        resolve("unsupported");
        return false;
      }
      // The body's first bytes go to the start of the buffer, which then fills on.
      cur.copyWithin(0, end + 4, fill);
      fill -= end + 4;
      left = streamed ? Number(length) : 0;
      answered = true;
      resolve({
        status,
        location: h.get("location"),
        contentLength: length === undefined ? undefined : Number(length),
        contentRange: h.get("content-range"),
        body: body(),
        discard: () => socket.destroy(),
        close: () => socket.destroy(),
      });
      if (!streamed) {
        finished = true;
        process.nextTick(() => socket.destroy());
        return false;
      }
      return bodyBytes(fill);
    };

    const socket = net.connect({
      host: dialHost(url),
      port: Number(url.port || 80),
      onread: {
        buffer: () => cur.subarray(fill),
        callback: (n: number) => {
          if (finished || failed !== undefined) return false;
          fill += n;
          return left < 0 ? onHead() : bodyBytes(n);
        },
      },
    });
    socket.setNoDelay(true);
    socket.setTimeout(idleMs, () => socket.destroy(new Error(`no data for ${idleMs} ms`)));
    const forgetAbort = onAbort(signal, () => socket.destroy(signal.reason as Error));
    socket.on("connect", () => socket.write(head));
    socket.on("error", (err) => fail(signal.aborted ? (signal.reason as Error) : err));
    socket.on("close", () => {
      forgetAbort();
      if (!finished) fail(Object.assign(new Error("the connection closed before the answer was complete"), { code: "ECONNRESET" }));
    });

    async function* body(): AsyncGenerator<Uint8Array> {
      try {
        for (;;) {
          const chunk = queue.shift();
          if (chunk !== undefined) {
            if (paused && queue.length < MAX_QUEUED / 2) {
              paused = false;
              socket.resume();
            }
            yield chunk;
            continue;
          }
          if (failed !== undefined) throw failed;
          if (finished) return;
          await new Promise<void>((woken) => (wake = woken));
          wake = undefined;
        }
      } finally {
        socket.destroy();
      }
    }
  });
}
