// The relay's HTTP client to a runtime: node:http over kept-alive connections. fetch cost the agent
// more per relayed request than everything else it does for one (bench/openai.ts, BENCH_CPU_PROF:
// its web streams, request clone and the AbortSignal.any/timeout pair were over a third of the
// agent's CPU); this writes the body and hands back the response as it comes, nothing more.
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { onAbort } from "../../common/abort.js";
import type { Cancel } from "../../common/cancel.js";

/** Connections kept open per runtime when idle: as many as requests run at once, up to this. */
const maxIdleConnections = 256;

export interface RuntimePost {
  path: string;
  body: string;
  /** The caller's cancellation: the request (or its response) is destroyed with its reason. */
  signal: AbortSignal | Cancel | undefined;
  /** Destroys the request with a TimeoutError when no whole answer came within it. */
  timeoutMs: number;
  /** On a connection of its own rather than a kept-alive one (which may be one the runtime is closing). */
  fresh?: boolean;
}

export class RuntimeHttp {
  private readonly agent: HttpAgent;
  private readonly request: typeof httpRequest;
  /** The origin as request options: a URL parsed per request showed in the agent's profile. */
  private readonly target: { protocol: string; hostname: string; port: string };

  constructor(origin: URL) {
    const https = origin.protocol === "https:";
    this.target = { protocol: origin.protocol, hostname: origin.hostname.replace(/^\[|\]$/g, ""), port: origin.port };
    this.agent = https
      ? new HttpsAgent({ keepAlive: true, maxFreeSockets: maxIdleConnections })
      : new HttpAgent({ keepAlive: true, maxFreeSockets: maxIdleConnections });
    this.request = https ? httpsRequest : httpRequest;
  }

  /**
   * POSTs JSON; resolves with the response once its head arrived. `done` must be called when the
   * response is read or given up: it disarms the deadline.
   */
  post(p: RuntimePost): Promise<{ res: IncomingMessage; done: () => void }> {
    return new Promise((resolve, reject) => {
      const req = this.request({
        ...this.target,
        path: p.path,
        method: "POST",
        agent: p.fresh ? false : this.agent,
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(p.body) },
      });
      // Before the head, the request fails; after it, the response's reader does.
      let current: { destroy(err: Error): unknown } = req;
      const timer = setTimeout(
        () => current.destroy(new DOMException(`the runtime did not answer within ${p.timeoutMs} ms`, "TimeoutError")),
        p.timeoutMs,
      );
      const signal = p.signal;
      const cancel = () => current.destroy(reasonOf(signal!));
      let forget: (() => void) | undefined;
      const done = () => {
        clearTimeout(timer);
        forget?.();
      };
      req.once("response", (res) => {
        current = res;
        resolve({ res, done });
      });
      req.once("error", (err) => {
        done();
        reject(err);
      });
      if (signal?.aborted) return cancel();
      if (signal !== undefined) forget = onAbort(signal, cancel);
      req.end(p.body);
    });
  }
}

const reasonOf = (signal: AbortSignal | Cancel): Error =>
  signal.reason instanceof Error ? signal.reason : new DOMException("the request was cancelled", "AbortError");

/** The whole body of a response (bounded by the caller's deadline, as the runtime is the agent's own). */
export async function readAll(res: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of res as AsyncIterable<Buffer>) chunks.push(chunk);
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
}
