// Prefix-aware routing against power of two choices alone, in the same run.
//
// Live: two stacks (bench/support/engine-stack.ts), each a control plane and four real agents, each
// agent one replica of the same model (a llama-architecture GGUF of about 3M parameters, so that a
// prompt's prefill dominates its first token; one character is one token in its vocabulary).
// One stack routes by prefix, the other has MODELFORGE_PREFIX_ROUTING=off. Each run: 16
// conversations at once, each growing over 6 turns (a 100-token user message, a streamed answer of
// at most 32 tokens), the next turn sent when the last is answered: 16 in flight on 4 replicas of
// `parallel` 4 slots, the replicas' capacity. The system prompt is 1,500 tokens, one for all
// conversations ("shared": an agent framework's), and then one per conversation ("own": a tenant's
// context, as in llm-d's benchmark). Runs alternate between the stacks, with new system prompts
// each run so no run finds another's cache. Per run: time to first token (p50, p90) from the
// request to its first streamed token, over all turns and over turns 2-6 (a conversation's first
// turn finds nothing cached under any routing, and is a sixth of the turns), output tokens/s over
// the run, and the share of prompt tokens the runtimes reported cached.
//
// Then the rule's own cost per request at 4 replicas (pickByPrefix; and the whole step: render,
// hash, match, rule, record, for a 2,000-token chat), beside pickReplica's as the anchor; and, in
// a replay of the same conversations through the index alone, what it costs when a load balancer
// alternates each conversation's turns over two control planes of two replicas each: the share of
// prompt tokens a replica was sent before (the engine's cache taken as unbounded).
//
//   npx tsx bench/prefix-routing.ts [runs=3]   (ONLY=live|rule|planes runs one part; SYSTEM=shared|own
//                                             one variant; PREFIX_MARGIN=n the overload margin)
import { mkdtempSync, rmSync } from "node:fs";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fetch } from "undici";
import { writeTinyLlamaGguf, type ModelShape } from "../scripts/gguf.js";
import { mulberry32 } from "../common/random.js";
import { InvokeApi } from "../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { PrefixRouting } from "../server/invoke/prefix-routing.js";
import { pickByPrefix } from "../server/invoke/prefix-rules.js";
import { checkPayload, pickReplica } from "../server/invoke/rules.js";
import type { DeploymentTarget } from "../server/invoke/routes.js";
import { startApiStack, type ApiStack } from "./support/engine-stack.js";
import { summarize } from "./support/stats.js";

const runs = Math.max(3, Number(process.argv[2] ?? 3));
const only = process.env.ONLY;
const conversations = 16;
const turns = 6;
const systemTokens = 1_500;
const userTokens = 100;
const answerTokens = 32;
const context = 4_096;
const parallel = 4;
const shape: ModelShape = { embedding: 256, blocks: 4, heads: 4, feedForward: 704 };

interface Message {
  role: "system" | "user" | "assistant";
  content: string;
}

/** Printable words from a seeded generator, `chars` long. */
function words(chars: number, seed: number): string {
  const random = mulberry32(seed);
  let text = "";
  while (text.length < chars) text += `${Math.floor(random() * 1e9).toString(36)} `;
  return text.slice(0, chars);
}

interface Turn {
  /** 0 for a conversation's first: nothing of it is cached anywhere, whatever the routing. */
  index: number;
  ttftMs: number;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
}

/** One streamed chat turn through the OpenAI API: its first token's time and its usage; the answer's text. */
async function turn(stack: ApiStack, messages: Message[], index: number): Promise<{ turn: Turn; answer: string }> {
  const t0 = performance.now();
  const res = await fetch(`${stack.url}/v1/chat/completions`, {
    method: "POST",
    dispatcher: stack.dispatcher,
    headers: { ...stack.headers, "content-type": "application/json" },
    body: JSON.stringify({
      model: "bench",
      messages,
      max_tokens: answerTokens,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    }),
  });
  if (res.status !== 200) throw new Error(`a turn answered ${res.status}: ${await res.text()}`);
  let ttftMs = Number.NaN;
  let answer = "";
  let usage: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens?: number } } | undefined;
  let buffered = "";
  for await (const chunk of res.body!) {
    buffered += Buffer.from(chunk as Uint8Array).toString("utf8");
    let end = buffered.indexOf("\n\n");
    while (end >= 0) {
      const event = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      end = buffered.indexOf("\n\n");
      if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
      const data = JSON.parse(event.slice(6)) as { choices?: { delta?: { content?: string } }[]; usage?: typeof usage };
      const content = data.choices?.[0]?.delta?.content;
      if (content !== undefined && content !== "") {
        if (Number.isNaN(ttftMs)) ttftMs = performance.now() - t0;
        answer += content;
      }
      if (data.usage) usage = data.usage;
    }
  }
  if (usage === undefined) throw new Error("a turn without usage");
  return {
    turn: {
      index,
      ttftMs: Number.isNaN(ttftMs) ? performance.now() - t0 : ttftMs,
      promptTokens: usage.prompt_tokens,
      cachedTokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
      completionTokens: usage.completion_tokens,
    },
    answer,
  };
}

/** The conversations' system prompts for one run: one shared, or one each. */
function systems(kind: "shared" | "own", run: number): string[] {
  return Array.from({ length: conversations }, (_, c) => words(systemTokens, run * 1000 + (kind === "shared" ? 0 : c + 1)));
}

interface RunResult {
  p50: number;
  p90: number;
  /** Of the turns after each conversation's first. */
  laterP90: number;
  tokensPerSecond: number;
  cachedShare: number;
}

/** 16 conversations at once, 6 turns each, on one stack. */
async function liveRun(stack: ApiStack, prompts: string[], run: number): Promise<RunResult> {
  const all: Turn[] = [];
  const t0 = performance.now();
  await Promise.all(
    prompts.map(async (system, c) => {
      const messages: Message[] = [{ role: "system", content: system }];
      for (let t = 0; t < turns; t++) {
        messages.push({ role: "user", content: words(userTokens, run * 100_000 + c * 100 + t) });
        const { turn: done, answer } = await turn(stack, messages, t);
        all.push(done);
        messages.push({ role: "assistant", content: answer });
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  const ttft = summarize(all.map((t) => t.ttftMs));
  const prompt = all.reduce((s, t) => s + t.promptTokens, 0);
  return {
    p50: ttft.p50,
    p90: ttft.p90,
    laterP90: summarize(all.filter((t) => t.index > 0).map((t) => t.ttftMs)).p90,
    tokensPerSecond: all.reduce((s, t) => s + t.completionTokens, 0) / seconds,
    cachedShare: all.reduce((s, t) => s + t.cachedTokens, 0) / prompt,
  };
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const spread = (values: number[], f: (v: number) => string) => {
  const s = [...values].sort((a, b) => a - b);
  return `${f(median(s))} (${f(s[0]!)}-${f(s.at(-1)!)})`;
};

async function live(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "mf-bench-prefix-"));
  const modelPath = join(dir, "model.gguf");
  await writeTinyLlamaGguf(modelPath, { contextLength: context, shape });
  const options = { modelPath, threads: 1, parallel, context, agents: 4 };
  // PREFIX_MARGIN: the prefix stack's MODELFORGE_PREFIX_OVERLOAD_MARGIN (default the server's).
  const margin = process.env.PREFIX_MARGIN;
  const prefix = await startApiStack({ ...options, ...(margin ? { serverEnv: { MODELFORGE_PREFIX_OVERLOAD_MARGIN: margin } } : {}) });
  const p2c = await startApiStack({ ...options, serverEnv: { MODELFORGE_PREFIX_ROUTING: "off" } });
  try {
    for (const kind of (process.env.SYSTEM === undefined ? ["shared", "own"] : [process.env.SYSTEM]) as ("shared" | "own")[]) {
      const results = { prefix: [] as RunResult[], p2c: [] as RunResult[] };
      for (let run = 0; run < runs; run++) {
        // Alternating, and each with system prompts no earlier run used.
        for (const [name, stack] of [
          ["prefix", prefix],
          ["p2c", p2c],
        ] as const) {
          const r = await liveRun(stack, systems(kind, run * 2 + (name === "prefix" ? 0 : 1) + (kind === "own" ? 100 : 0)), run);
          results[name].push(r);
          console.log(
            `${kind} run ${run + 1} ${name.padEnd(6)}: TTFT p50 ${r.p50.toFixed(0)} ms, p90 ${r.p90.toFixed(0)} ms ` +
              `(turns 2-6: ${r.laterP90.toFixed(0)} ms), ` +
              `${r.tokensPerSecond.toFixed(1)} output tokens/s, ${(r.cachedShare * 100).toFixed(1)} % of prompt tokens cached ` +
              `(load ${loadavg()[0]!.toFixed(2)})`,
          );
        }
      }
      const ratio = (f: (r: RunResult) => number) => results.prefix.map((r, i) => f(r) / f(results.p2c[i]!));
      console.log(
        `${kind} system prompt, prefix / p2c over ${runs} runs, median (min-max): ` +
          `TTFT p50 ${spread(
            ratio((r) => r.p50),
            (v) => v.toFixed(2),
          )}, p90 ${spread(
            ratio((r) => r.p90),
            (v) => v.toFixed(2),
          )} (turns 2-6: ${spread(
            ratio((r) => r.laterP90),
            (v) => v.toFixed(2),
          )}), output tokens/s ${spread(
            ratio((r) => r.tokensPerSecond),
            (v) => v.toFixed(2),
          )}; p2c p90 ${spread(
            results.p2c.map((r) => r.p90),
            (v) => `${v.toFixed(0)} ms`,
          )}, cached ${spread(
            results.prefix.map((r) => r.cachedShare * 100),
            (v) => `${v.toFixed(0)} %`,
          )} against ${spread(
            results.p2c.map((r) => r.cachedShare * 100),
            (v) => `${v.toFixed(0)} %`,
          )}`,
      );
    }
  } finally {
    await prefix.stop();
    await p2c.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

function target(replicas: number, first = 0): DeploymentTarget {
  return {
    deploymentId: "00000000-0000-4000-8000-000000000001",
    name: "bench",
    phase: "READY",
    createdAt: 0,
    maxInFlight: 64,
    invokeTimeoutMs: 60_000,
    ready: Array.from({ length: replicas }, (_, i) => ({
      revision: 1n,
      replica: first + i,
      nodeId: `n${first + i}`,
      phase: "READY" as const,
      engine: "llama.cpp",
      embeddings: false,
      runtimeId: `rt-${first + i}`,
    })),
  };
}

/** Microseconds per call over `n` calls, 5 times: median (min-max). */
function perCall(n: number, body: (i: number) => void): string {
  const samples: number[] = [];
  for (let r = 0; r < 5; r++) {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) body(i);
    samples.push(((performance.now() - t0) * 1000) / n);
  }
  return spread(samples, (v) => `${v.toFixed(2)} µs`);
}

function ruleCost(): void {
  const four = target(4);
  const load = new Map(four.ready.map((r, i) => [r, { inFlight: i % 3, queued: 0 }]));
  const random = mulberry32(1);
  const hints = { promptBlocks: 16, matched: (r: (typeof four.ready)[number]) => (r.replica === 2 ? 12 : 0), session: undefined };
  console.log(`pickReplica (anchor), 4 replicas: ${perCall(200_000, () => pickReplica(four.ready, (r) => load.get(r)!, 64, random))}`);
  console.log(
    `pickByPrefix (the rule), 4 replicas: ${perCall(200_000, () => pickByPrefix(four.ready, (r) => load.get(r)!, 64, random, hints))}`,
  );
  // The whole step for a 2,000-token chat (1,500 system, 500 of its own), 64 conversations in turn.
  const routing = new PrefixRouting({ budgetBytes: 8 * 1024 * 1024 });
  const system = words(systemTokens, 9);
  const bodies = Array.from({ length: 64 }, (_, c) =>
    checkPayload(
      "",
      Buffer.from(
        JSON.stringify({
          messages: [
            { role: "system", content: system },
            { role: "user", content: words(500, c) },
          ],
        }),
      ),
      InvokeApi.CHAT_COMPLETIONS,
    ),
  );
  console.log(
    `render + hash + match + rule + record, 2,000-token chat, 4 replicas: ${perCall(20_000, (i) => {
      const checked = bodies[i % 64]!;
      routing.choose(four, four.ready, (r) => load.get(r)!, random, routing.promptOf(checked, "k1")!);
    })}`,
  );
}

/** The conversations as a replay: each turn's messages, in the order the turns are sent (round robin over conversations). */
function replay(kind: "shared" | "own"): Message[][] {
  const prompts = systems(kind, 7);
  const histories = prompts.map((system) => [{ role: "system", content: system }] as Message[]);
  const sent: Message[][] = [];
  for (let t = 0; t < turns; t++) {
    for (let c = 0; c < conversations; c++) {
      histories[c]!.push({ role: "user", content: words(userTokens, c * 100 + t) });
      sent.push([...histories[c]!]);
      histories[c]!.push({ role: "assistant", content: words(answerTokens, 50_000 + c * 100 + t) });
    }
  }
  return sent;
}

/** Of the prompts' characters, the share a replica was sent before (its longest common prefix with any earlier prompt sent there). */
function cachedShare(planes: { routing: PrefixRouting | undefined; replicas: DeploymentTarget }[], prompts: Message[][]): number {
  const seen = new Map<number, string[]>();
  let total = 0;
  let cached = 0;
  const random = mulberry32(3);
  prompts.forEach((messages, i) => {
    // The load balancer: each turn of a conversation to the next plane in turn.
    const plane = planes[Math.floor(i / conversations) % planes.length]!;
    const checked = checkPayload("", Buffer.from(JSON.stringify({ messages })), InvokeApi.CHAT_COMPLETIONS);
    const idle = () => ({ inFlight: 0, queued: 0 });
    const replica =
      plane.routing === undefined
        ? pickReplica(plane.replicas.ready, idle, 64, random)!
        : plane.routing.choose(plane.replicas, plane.replicas.ready, idle, random, plane.routing.promptOf(checked, "k1")!)!;
    const text = JSON.stringify(messages);
    let best = 0;
    for (const earlier of seen.get(replica.replica) ?? []) {
      let n = 0;
      while (n < text.length && n < earlier.length && text.charCodeAt(n) === earlier.charCodeAt(n)) n++;
      best = Math.max(best, n);
    }
    seen.set(replica.replica, [...(seen.get(replica.replica) ?? []), text]);
    total += text.length;
    cached += best;
  });
  return cached / total;
}

function twoPlanes(): void {
  for (const kind of ["shared", "own"] as const) {
    const prompts = replay(kind);
    const one = cachedShare([{ routing: new PrefixRouting({ budgetBytes: 8 << 20 }), replicas: target(4) }], prompts);
    const two = cachedShare(
      [
        { routing: new PrefixRouting({ budgetBytes: 8 << 20 }), replicas: target(2, 0) },
        { routing: new PrefixRouting({ budgetBytes: 8 << 20 }), replicas: target(2, 2) },
      ],
      prompts,
    );
    const p2c = cachedShare([{ routing: undefined, replicas: target(4) }], prompts);
    console.log(
      `${kind} system prompt, replayed through the index: prompt characters a replica was sent before: ` +
        `one control plane ${(one * 100).toFixed(1)} %, two alternating ${(two * 100).toFixed(1)} %, ` +
        `power of two choices ${(p2c * 100).toFixed(1)} %`,
    );
  }
}

console.log(
  `${availableParallelism()} cores, load ${loadavg()
    .map((l) => l.toFixed(2))
    .join(" ")}`,
);
if (only === undefined || only === "rule") ruleCost();
if (only === undefined || only === "planes") twoPlanes();
if (only === undefined || only === "live") await live();
console.log(
  `load after: ${loadavg()
    .map((l) => l.toFixed(2))
    .join(" ")}`,
);
