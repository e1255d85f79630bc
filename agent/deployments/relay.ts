// The agent's side of the invoke relay and of log watches, on the Session: an InvokeStart runs one
// request against the held runtime's OpenAI-compatible endpoint and answers with InvokeAnswer
// messages (the whole body, or each stream chunk as the runtime produces it); InvokeCancel aborts
// the runtime's request. A LogWatch forwards a runtime's output while the server watches it.
import { durationMs } from "@bufbuild/protobuf/wkt";
import type { Logger } from "pino";
import type { InvokeStart, LogWatch, SessionResponse } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { InvokeApi, type RuntimeLogLine } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { fitMessage, refusalCode, refusalMessage } from "./refusal.js";
import { OpenAiError } from "../engines/openai-protocol.js";
import { prepareChat, prepareCompletion, prepareEmbeddings, type Prepared } from "../engines/llama-cpp/request.js";
import { shapeAnswer, StreamShaper } from "../engines/llama-cpp/answer.js";
import { embeddingEngineNames } from "../../common/engines.js";
import type { RelayLink as SessionLink, SessionMessage } from "./session-hook.js";
import { notHeld, type DeploymentHost } from "./host.js";
import { WatchOutbox } from "./logs.js";
import { Cancel } from "../../common/cancel.js";

const paths = {
  [InvokeApi.COMPLETIONS]: "/v1/completions",
  [InvokeApi.CHAT_COMPLETIONS]: "/v1/chat/completions",
  [InvokeApi.EMBEDDINGS]: "/v1/embeddings",
} as const;

/** Most log watches one agent serves at once. */
const maxWatches = 16;
const flushMs = 100;
const cancelledByServer = new Error("cancelled by the server");

interface Watch {
  link: SessionLink;
  deploymentId: string;
  outbox: WatchOutbox;
}

export class DeploymentRelay {
  /** Running invokes per session: ids are the server's, unique only on one session. */
  private readonly invokes = new WeakMap<SessionLink, Map<bigint, Cancel>>();
  private readonly watches = new Map<bigint, Watch>();
  private flusher: NodeJS.Timeout | undefined;

  constructor(
    private readonly host: DeploymentHost,
    private readonly log: Logger,
  ) {
    host.onLine((deploymentId, line) => this.forward(deploymentId, [line]));
  }

  /** A server push that is not a job: invoke, invoke cancel, log watch. */
  onMessage(message: SessionResponse["message"], link: SessionLink): void {
    switch (message.case) {
      case "invoke":
        // invoke() answers every failure it expects; anything else is ours, told as internal.
        this.invoke(message.value, link).catch((err: unknown) => {
          this.log.error({ err, deploymentId: message.value.invoke?.deploymentId }, "invoke failed unexpectedly");
          void link.tell({
            case: "invokeAnswer",
            value: { invokeId: message.value.invokeId, done: true, error: { code: "internal", message: "internal error" } },
          });
        });
        break;
      case "invokeCancel":
        this.invokes.get(link)?.get(message.value.invokeId)?.abort(cancelledByServer);
        break;
      case "logWatch":
        this.watch(message.value, link);
        break;
    }
  }

  /** Not awaited: log lines go out in order on the stream. False when the session has closed. */
  private send(link: SessionLink, message: SessionMessage): Promise<boolean> {
    return link.send(message).then(
      () => true,
      () => false,
    );
  }

  private async invoke(start: InvokeStart, link: SessionLink): Promise<void> {
    const id = start.invokeId;
    const spec = start.invoke;
    // Answers are told, not sent: the server would only acknowledge them, and nothing here waits on that.
    const fail = (code: string, message: string) =>
      void link.tell({ case: "invokeAnswer", value: { invokeId: id, done: true, error: { code, message } } });
    if (spec === undefined) return fail("invalid_argument", "the invoke names no request");
    const held = this.host.forInvoke(spec);
    if (held === undefined) return fail("unavailable", notHeld(spec));
    if (held.draining) return fail("unavailable", `deployment ${spec.deploymentId} revision ${held.revision} is draining`);
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(Buffer.from(spec.payload).toString("utf8")) as Record<string, unknown>;
    } catch {
      return fail("invalid_argument", "the payload is not JSON");
    }
    const embeddings = start.api === InvokeApi.EMBEDDINGS;
    // The server checked the advertisement; a runtime of another engine is still refused here.
    if (embeddings && !embeddingEngineNames.includes(held.runtime.engine)) {
      return fail("unimplemented", `deployment ${spec.deploymentId}'s engine ${held.runtime.engine} serves no embeddings`);
    }
    const path = paths[start.api as keyof typeof paths] ?? paths[InvokeApi.COMPLETIONS];
    // The built-in engine's fields are checked and put in llama-server's terms here; an external
    // server (openai-http) gets the caller's body as it is.
    let prepared: Prepared | undefined;
    if (held.runtime.engine === "llama.cpp") {
      try {
        const limits = { contextSize: held.runtime.contextSize };
        const asked = embeddings ? body : { ...body, stream: start.stream };
        prepared = (embeddings ? prepareEmbeddings : start.api === InvokeApi.CHAT_COMPLETIONS ? prepareChat : prepareCompletion)(
          asked,
          limits,
        );
      } catch (err) {
        if (err instanceof OpenAiError) return fail("invalid_argument", fitMessage(err.message));
        throw err;
      }
      body = prepared.body;
    }
    const cancel = new Cancel();
    const running = this.invokes.get(link) ?? new Map<bigint, Cancel>();
    this.invokes.set(link, running);
    running.set(id, cancel);
    this.host.track(held, cancel, true);
    // One timer for the request's deadline, waiting at the gate included: AbortSignal.timeout and
    // AbortSignal.any per request were a measurable share of the agent's CPU (bench/openai.ts).
    const timeoutMs = Math.max(1, spec.timeout === undefined ? 30_000 : durationMs(spec.timeout));
    // Made only when it fires: a DOMException per request costs more than the timer.
    let timedOut: DOMException | undefined;
    const deadline = setTimeout(() => {
      timedOut = new DOMException(`no answer within ${timeoutMs} ms`, "TimeoutError");
      cancel.abort(timedOut);
    }, timeoutMs);
    const answer = (payload: Uint8Array, done: boolean) =>
      void link.tellAnswer({ invokeId: id, contentType: "application/json", payload, done, revision: held.revision });
    let release: (() => void) | undefined;
    try {
      release = await held.gate.acquire(cancel);
      if (start.stream && !embeddings) {
        const text = JSON.stringify({ ...body, stream: true });
        const shaper = prepared === undefined ? undefined : new StreamShaper(prepared);
        const chunk = (data: string) => {
          // Only chunks to rewrite are parsed: tools, logprobs, or the usage llama-server puts on
          // its last token chunk (OpenAI's comes in a chunk of its own).
          if (shaper === undefined || (!shaper.active && !data.includes('"usage"'))) answer(Buffer.from(data), false);
          else
            for (const shaped of shaper.chunk(JSON.parse(data) as Record<string, unknown>))
              answer(Buffer.from(JSON.stringify(shaped)), false);
        };
        await held.runtime.client.streamRaw(path, text, chunk, cancel, timeoutMs);
        answer(new Uint8Array(), true);
      } else {
        const text = JSON.stringify(embeddings ? body : { ...body, stream: false });
        const whole = await held.runtime.client.postRaw(path, text, cancel, timeoutMs);
        const shaped = prepared?.tools !== undefined || prepared?.completionLogprobs === true;
        answer(shaped ? Buffer.from(JSON.stringify(shapeAnswer(prepared!, JSON.parse(whole.toString("utf8"))))) : whole, true);
      }
    } catch (err) {
      // Cancelled by the server: it has stopped listening.
      if (cancel.reason === cancelledByServer) return;
      const code =
        timedOut !== undefined && cancel.reason === timedOut ? "deadline_exceeded" : cancel.aborted ? "unavailable" : refusalCode(err);
      this.log.debug({ deploymentId: spec.deploymentId, requestId: spec.requestId, code }, "invoke failed");
      fail(code, refusalMessage(err));
    } finally {
      clearTimeout(deadline);
      release?.();
      running.delete(id);
      this.host.track(held, cancel, false);
    }
  }

  private watch(w: LogWatch, link: SessionLink): void {
    if (!w.start) {
      this.watches.delete(w.watchId);
      if (this.watches.size === 0) this.stopFlusher();
      return;
    }
    const held = this.host.matching({ deploymentId: w.deploymentId, revision: 0n });
    if (held.length === 0 || this.watches.size >= maxWatches) {
      void this.send(link, { case: "logLines", value: { watchId: w.watchId, ended: true } });
      return;
    }
    const outbox = new WatchOutbox(this.host.logLimits, this.host.clock.now());
    const tail = held
      .flatMap((h) => h.logs.tail(w.tailLines))
      .sort(
        (a, b) =>
          Number((a.observedAt?.seconds ?? 0n) - (b.observedAt?.seconds ?? 0n)) || (a.observedAt?.nanos ?? 0) - (b.observedAt?.nanos ?? 0),
      )
      .slice(-w.tailLines);
    outbox.add(tail);
    this.watches.set(w.watchId, { link, deploymentId: w.deploymentId, outbox });
    this.flusher ??= setInterval(() => this.flush(), flushMs);
    this.flush();
  }

  private forward(deploymentId: string, lines: RuntimeLogLine[]): void {
    for (const w of this.watches.values()) if (w.deploymentId === deploymentId) w.outbox.add(lines);
  }

  private flush(): void {
    const now = this.host.clock.now();
    for (const [watchId, w] of this.watches) {
      // A deployment no longer held ends its watches.
      const ended = this.host.matching({ deploymentId: w.deploymentId, revision: 0n }).length === 0;
      const batch = w.outbox.take(now);
      if (batch !== undefined || ended) {
        const sent = this.send(w.link, {
          case: "logLines",
          value: { watchId, lines: batch?.lines ?? [], droppedLines: batch?.dropped ?? 0n, ended },
        });
        // A session that closed took its watches with it (the server ended them).
        void sent.then((ok) => ok || this.watches.delete(watchId));
      }
      if (ended) this.watches.delete(watchId);
    }
    if (this.watches.size === 0) this.stopFlusher();
  }

  private stopFlusher(): void {
    if (this.flusher !== undefined) clearInterval(this.flusher);
    this.flusher = undefined;
  }
}
