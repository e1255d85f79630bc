// The relay's HTTP client to a runtime: undici's dispatcher, whose callbacks take the answer's head
// and body pieces as its parser reads them. fetch cost the agent more per relayed request than
// everything else it does for one (its web streams, request clone and signals), and node:http's
// client still cost about three times undici's dispatch on a loopback runtime (bench/openai.ts,
// BENCH_CPU_PROF): a request object, a socket stream and a response stream per request.
import { Client, Pool } from "undici";
import { onAbort } from "../../common/abort.js";
import type { Cancel } from "../../common/cancel.js";

export interface RuntimePost {
  path: string;
  body: string;
  /** The caller's cancellation: the request (or its answer) is cut with its reason. */
  signal: AbortSignal | Cancel | undefined;
  /** Cuts the request with a TimeoutError when no whole answer came within it. */
  timeoutMs: number;
  /** On a connection of its own rather than a kept-alive one (which may be one the runtime is closing). */
  fresh?: boolean;
}

/**
 * What one request's answer is handed to, in order: its status, each piece of its body, then its
 * end, or a failure at any point (after which nothing more comes). A throw from `head` or `data`
 * cuts the request and comes back as the failure.
 */
export interface RuntimeAnswer {
  head(status: number): void;
  data(chunk: Buffer): void;
  end(): void;
  fail(err: Error): void;
}

/**
 * The runtime's own deadline is the caller's (`timeoutMs`), so undici's are off; connections kept
 * open are as many as requests run at once, closed by undici when idle past the server's hint.
 */
const options = { headersTimeout: 0, bodyTimeout: 0 } as const;
const headers = ["content-type", "application/json"];

export class RuntimeHttp {
  private readonly pool: Pool;

  constructor(private readonly origin: URL) {
    this.pool = new Pool(origin, options);
  }

  /** POSTs JSON and hands the answer to `answer` as it comes. */
  post(p: RuntimePost, answer: RuntimeAnswer): void {
    const dispatcher = p.fresh ? new Client(this.origin, { ...options, pipelining: 0 }) : this.pool;
    let over = false;
    let cut: ((err: Error) => void) | undefined;
    let cutBeforeConnect: Error | undefined;
    let forget: (() => void) | undefined;
    const settle = () => {
      over = true;
      clearTimeout(timer);
      forget?.();
      if (p.fresh) void dispatcher.close();
    };
    // Before undici hands over its abort, the failure is told at once and the request cut as it starts.
    const stop = (err: Error) => {
      if (over) return;
      if (cut !== undefined) return cut(err);
      cutBeforeConnect = err;
      settle();
      answer.fail(err);
    };
    const timer = setTimeout(
      () => stop(new DOMException(`the runtime did not answer within ${p.timeoutMs} ms`, "TimeoutError")),
      p.timeoutMs,
    );
    const signal = p.signal;
    if (signal !== undefined) forget = onAbort(signal, () => stop(reasonOf(signal)));
    if (over) return;
    dispatcher.dispatch(
      { path: p.path, method: "POST", headers, body: p.body },
      {
        onConnect(abort) {
          if (cutBeforeConnect !== undefined) abort(cutBeforeConnect);
          else cut = abort;
        },
        onHeaders(status) {
          // A 1xx is not the answer.
          if (over || status < 200) return true;
          try {
            answer.head(status);
          } catch (err) {
            stop(asError(err));
          }
          return true;
        },
        onData(chunk) {
          if (over) return true;
          try {
            answer.data(chunk);
          } catch (err) {
            stop(asError(err));
          }
          return true;
        },
        onComplete() {
          if (over) return;
          settle();
          answer.end();
        },
        onError(err) {
          if (over) return;
          settle();
          answer.fail(err);
        },
      },
    );
  }
}

const reasonOf = (signal: AbortSignal | Cancel): Error =>
  signal.reason instanceof Error ? signal.reason : new DOMException("the request was cancelled", "AbortError");

const asError = (err: unknown): Error => (err instanceof Error ? err : new Error(String(err)));
