// Service clients invoking "tiny" in a loop and noting what each answer said it used, so an
// accounting drill can compare the usage the control plane recorded with what clients were given.
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { grpcTransport } from "../../common/http2-sessions.js";
import type { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { UsageGrouping } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentService } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { type Dispatcher, fetch as undiciFetch } from "undici";

/** One invoke the client got an answer to: when, and the usage the answer carried. */
export interface Answer {
  at: number;
  promptTokens: number;
  completionTokens: number;
}

export interface InvokeLoop {
  answers: Answer[];
  failures: string[];
  /** Resolves when the loop has seen `stop` and its last call has ended. */
  done: Promise<void>;
}

export function serviceClient(url: string, caPem: string, key: () => string): Client<typeof DeploymentService> {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${key()}`);
    return next(req);
  };
  return createClient(DeploymentService, grpcTransport({ baseUrl: url, nodeOptions: { ca: caPem }, interceptors: [auth] }));
}

/** A greedy completion of at most `max` tokens; a stream asks for its usage in the last chunk. */
export const completion = (max: number, stream = false) =>
  Buffer.from(
    JSON.stringify({
      prompt: "The quick brown fox",
      max_tokens: max,
      temperature: 0,
      ...(stream ? { stream_options: { include_usage: true } } : {}),
    }),
  );

interface OpenAiUsage {
  prompt_tokens?: number;
  completion_tokens?: number;
}

function answerOf(usage: OpenAiUsage | undefined | null): Answer {
  if (typeof usage?.completion_tokens !== "number" || typeof usage.prompt_tokens !== "number") throw new Error("an answer without usage");
  return { at: Date.now(), promptTokens: usage.prompt_tokens, completionTokens: usage.completion_tokens };
}

async function invokeOnce(client: Client<typeof DeploymentService>, stream: boolean): Promise<Answer> {
  if (!stream) {
    const res = await client.invoke({ deploymentId: "tiny", payload: completion(4) });
    const body = JSON.parse(Buffer.from(res.payload).toString("utf8")) as { object?: string; usage?: OpenAiUsage };
    if (body.object !== "text_completion") throw new Error("not a completion");
    return answerOf(body.usage);
  }
  let chunks = 0;
  let usage: OpenAiUsage | undefined;
  for await (const m of client.invokeStream({ deploymentId: "tiny", payload: completion(6, true) })) {
    chunks++;
    usage = (JSON.parse(Buffer.from(m.payload).toString("utf8")) as { usage?: OpenAiUsage }).usage ?? usage;
  }
  if (chunks < 2) throw new Error(`a stream of ${chunks} chunks`);
  return answerOf(usage);
}

/**
 * A greedy completion of at most 4 tokens through the OpenAI API at `url` with the service key
 * `secret`, as a client sends it (over `dispatcher`, which trusts the control plane's CA); the
 * usage it was answered with. Anything but a 200 throws, with the answer's body.
 */
export async function openAiCompletion(url: string, dispatcher: Dispatcher, secret: string, model: string, prompt: string) {
  const res = await undiciFetch(`${url}/v1/completions`, {
    method: "POST",
    dispatcher,
    headers: { authorization: `Bearer ${secret}`, "content-type": "application/json" },
    body: JSON.stringify({ model, prompt, max_tokens: 4, temperature: 0 }),
  });
  if (res.status !== 200) throw new Error(`completion answered ${res.status}: ${await res.text()}`);
  return answerOf(((await res.json()) as { usage?: OpenAiUsage }).usage);
}

/** Invokes in a loop until `stop`, unary or streamed, noting each answer and each failure. */
export function invokeLoop(client: Client<typeof DeploymentService>, stream: boolean, stop: AbortSignal): InvokeLoop {
  const answers: Answer[] = [];
  const failures: string[] = [];
  const done = (async () => {
    while (!stop.aborted) {
      try {
        answers.push(await invokeOnce(client, stream));
      } catch (err) {
        const e = ConnectError.from(err);
        failures.push(`${stream ? "stream" : "unary"}: ${Code[e.code]} ${e.rawMessage}`);
      }
    }
  })();
  return { answers, failures, done };
}

/** Requests and tokens, as clients were answered or as the control plane recorded them. */
export interface Totals {
  requests: number;
  failedRequests: number;
  promptTokens: number;
  completionTokens: number;
}

export function answered(answers: readonly Answer[]): Totals {
  return {
    requests: answers.length,
    failedRequests: 0,
    promptTokens: answers.reduce((n, a) => n + a.promptTokens, 0),
    completionTokens: answers.reduce((n, a) => n + a.completionTokens, 0),
  };
}

/** What GetUsage says the key used (all zero before its first flush). */
export async function recorded(admin: Client<typeof AdminService>, keyId: string): Promise<Totals> {
  const row = (await admin.getUsage({ keyId, by: UsageGrouping.KEY })).rows[0];
  return {
    requests: Number(row?.requests ?? 0),
    failedRequests: Number(row?.failedRequests ?? 0),
    promptTokens: Number(row?.promptTokens ?? 0),
    completionTokens: Number(row?.completionTokens ?? 0),
  };
}
