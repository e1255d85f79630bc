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
    new PlainGet(url, head, signal, idleMs, resolve, reject);
  });
}

/**
 * One GET on a connection of its own. The socket reads into the current buffer; the head is
 * parsed from its start, then whole buffers of the body (and the last, short one) are queued for
 * the reader, and the socket stops reading while the queue is full.
 */
class PlainGet {
  private cur = takeBuffer();
  private fill = 0;
  private answered = false;
  /** Body bytes still expected; -1 until the head is read. */
  private left = -1;
  private finished = false;
  private failed: Error | undefined;
  private paused = false;
  private readonly queue: Uint8Array[] = [];
  private wake: (() => void) | undefined;
  /** Where reads go once the body is complete: nothing after it is used. */
  private readonly spill = Buffer.allocUnsafe(4096);
  private readonly socket: net.Socket;

  constructor(
    url: URL,
    head: string,
    signal: AbortSignal,
    idleMs: number,
    private readonly resolve: (r: MirrorResponse | "unsupported") => void,
    private readonly reject: (err: Error) => void,
  ) {
    const socket = net.connect({
      host: dialHost(url),
      port: Number(url.port || 80),
      onread: {
        buffer: () => this.cur.subarray(this.fill),
        callback: (n: number) => {
          if (this.finished || this.failed !== undefined) return false;
          this.fill += n;
          return this.left < 0 ? this.onHead() : this.bodyBytes(n);
        },
      },
    });
    this.socket = socket;
    socket.setNoDelay(true);
    socket.setTimeout(idleMs, () => socket.destroy(new Error(`no data for ${idleMs} ms`)));
    const forgetAbort = onAbort(signal, () => socket.destroy(signal.reason as Error));
    socket.on("connect", () => socket.write(head));
    socket.on("error", (err) => this.fail(signal.aborted ? (signal.reason as Error) : err));
    socket.on("close", () => {
      forgetAbort();
      if (!this.finished)
        this.fail(Object.assign(new Error("the connection closed before the answer was complete"), { code: "ECONNRESET" }));
    });
  }

  private fail(err: Error): void {
    // What arrived of the body is handed on, so a resume starts after it, not at the slot's start.
    if (this.left >= 0 && this.fill > 0 && this.cur !== this.spill) {
      this.queue.push(this.cur.subarray(0, this.fill));
      this.cur = this.spill;
      this.fill = 0;
    }
    this.failed ??= err;
    if (!this.answered) {
      this.answered = true;
      this.reject(err);
    }
    this.wake?.();
  }

  /** Fails the answer and drops its connection; returns false, which stops the reading. */
  private refuse(message: string): false {
    this.fail(new Error(message));
    this.socket.destroy();
    return false;
  }

  /** `got` new body bytes end at `fill`; whole buffers (and the last) are queued for the reader. */
  private bodyBytes(got: number): boolean {
    if (got > this.left) {
      this.fill -= got;
      return this.refuse("the mirror sent more than its Content-Length");
    }
    this.left -= got;
    if (this.fill > 0 && (this.left === 0 || this.fill === this.cur.length)) {
      this.queue.push(this.cur.subarray(0, this.fill));
      this.cur = this.left === 0 ? this.spill : takeBuffer();
      this.fill = 0;
      this.wake?.();
    }
    if (this.left === 0) {
      this.finished = true;
      this.wake?.();
      process.nextTick(() => this.socket.destroy());
      return false;
    }
    if (this.queue.length >= MAX_QUEUED) this.paused = true;
    return !this.paused;
  }

  private onHead(): boolean {
    const end = this.cur.subarray(0, this.fill).indexOf(HEAD_END);
    if (end < 0) return this.fill < MAX_HEAD_BYTES || this.refuse("the mirror's answer head is too long");
    const parsed = parseHead(this.cur.toString("latin1", 0, end));
    if (parsed === undefined) return this.refuse("the mirror's answer is not valid HTTP/1.1");
    const { status, headers: h } = parsed;
    const length = h.get("content-length");
    const streamed = status === 200 || status === 206;
    if (streamed && (h.has("transfer-encoding") || length === undefined || !/^\d+$/.test(length))) {
      this.answered = true;
      this.socket.destroy();
      this.resolve("unsupported");
      return false;
    }
    // The body's first bytes go to the start of the buffer, which then fills on.
    this.cur.copyWithin(0, end + 4, this.fill);
    this.fill -= end + 4;
    this.left = streamed ? Number(length) : 0;
    this.answered = true;
    this.resolve({
      status,
      location: h.get("location"),
      contentLength: length === undefined ? undefined : Number(length),
      contentRange: h.get("content-range"),
      body: this.body(),
      discard: () => this.socket.destroy(),
      close: () => this.socket.destroy(),
    });
    if (!streamed) {
      this.finished = true;
      process.nextTick(() => this.socket.destroy());
      return false;
    }
    return this.bodyBytes(this.fill);
  }

  private async *body(): AsyncGenerator<Uint8Array> {
    try {
      for (;;) {
        const chunk = this.queue.shift();
        if (chunk !== undefined) {
          if (this.paused && this.queue.length < MAX_QUEUED / 2) {
            this.paused = false;
            this.socket.resume();
          }
          yield chunk;
          continue;
        }
        if (this.failed !== undefined) throw this.failed;
        if (this.finished) return;
        await new Promise<void>((woken) => (this.wake = woken));
        this.wake = undefined;
      }
    } finally {
      this.socket.destroy();
    }
  }
}
