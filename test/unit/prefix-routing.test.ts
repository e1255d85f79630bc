// Prefix-aware routing's pure parts: the chained block hashes of a rendered prompt, the rule beside
// pickReplica (table rows), the index's matches, its LRU bound and its memory measured after
// 100,000 distinct prompts, and a replica forgotten once its route no longer lists it.
import { describe, expect, it } from "vitest";
import { blockChars, blockHashes, keyHash, maxPromptBlocks, promptText } from "../../server/invoke/prefix-blocks.js";
import { bytesPerBlock, maxIndexedReplicas, PrefixIndex } from "../../server/invoke/prefix-index.js";
import { defaultPrefixPolicy, pickByPrefix, type PrefixDecision } from "../../server/invoke/prefix-rules.js";
import { identityOf, PrefixRouting } from "../../server/invoke/prefix-routing.js";
import type { DeploymentTarget } from "../../server/invoke/routes.js";
import { checkPayload } from "../../server/invoke/rules.js";
import { InvokeApi } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { mulberry32 } from "../../common/random.js";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

// A full collection before each heap reading, so that the index's own bytes are what is measured.
setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

const text = (n: number, seed = 1) => {
  const random = mulberry32(seed);
  return Array.from({ length: n }, () => String.fromCharCode(97 + Math.floor(random() * 26))).join("");
};

describe("block hashes", () => {
  it("cuts whole blocks only, and a block's hash names its whole prefix", () => {
    const a = text(blockChars * 3 + 10);
    expect(blockHashes(a)).toHaveLength(3);
    expect(blockHashes(a.slice(0, blockChars - 1))).toEqual([]);
    // Same head, different third block: the first two hashes agree, the third does not.
    const b = a.slice(0, blockChars * 2) + text(blockChars, 2);
    expect(blockHashes(b).slice(0, 2)).toEqual(blockHashes(a).slice(0, 2));
    expect(blockHashes(b)[2]).not.toBe(blockHashes(a)[2]);
    // Same second block after a different first: chained, so it differs too.
    const c = text(blockChars, 3) + a.slice(blockChars, blockChars * 2);
    expect(blockHashes(c)[1]).not.toBe(blockHashes(a)[1]);
  });

  it("is exact integers below 2^53, bounded in count", () => {
    for (const h of blockHashes(text(blockChars * 50))) expect(Number.isSafeInteger(h) && h >= 0).toBe(true);
    expect(blockHashes("x".repeat(blockChars * (maxPromptBlocks + 5)))).toHaveLength(maxPromptBlocks);
    expect(new Set(blockHashes(text(blockChars * 2000))).size).toBe(2000);
  });

  it("hashes a session key apart from another", () => {
    expect(keyHash("conversation-1")).toBe(keyHash("conversation-1"));
    expect(keyHash("conversation-1")).not.toBe(keyHash("conversation-2"));
  });

  const chat = (...contents: string[]) => ({ messages: contents.map((content, i) => ({ role: i === 0 ? "system" : "user", content })) });
  it.each([
    ["a chat's next turn extends its rendering", chat("s", "q1"), chat("s", "q1", "q2"), true],
    ["a changed system prompt does not", chat("s", "q1"), chat("t", "q1", "q2"), false],
    ["role counts", { messages: [{ role: "user", content: "x" }] }, { messages: [{ role: "system", content: "x" }] }, false],
    ["text parts render as text", { messages: [{ role: "user", content: [{ type: "text", text: "ab" }] }] }, chat("ab"), false],
  ])("%s", (_, first, next, extends_) => {
    const a = promptText("chat", first);
    const b = promptText("chat", next);
    expect(b.startsWith(a)).toBe(extends_);
  });

  it.each([
    ["a string", "hello", "hello"],
    ["the first of several", ["one", "two"], "one"],
    ["token ids", [1, 2, 3], "1,2,3"],
    ["the first list of token ids", [[4, 5], [6]], "4,5"],
  ])("a completion's prompt: %s", (_, prompt, want) => expect(promptText("completion", { prompt })).toBe(want));

  it("embeddings are not routed by prompt", () => expect(promptText("embeddings", { input: "x".repeat(500) })).toBe(""));
});

describe("pickByPrefix", () => {
  // Four replicas; load [inFlight, queued]; matched blocks of a 20-block prompt; session.
  type Row = [string, Record<string, [number, number]>, Record<string, number>, string | undefined, number, string, PrefixDecision];
  const rows: Row[] = [
    ["nothing matched: power of two choices", {}, {}, undefined, 2, "c", "no_match"],
    ["the longest match wins", {}, { a: 4, b: 12 }, undefined, 2, "b", "matched"],
    ["a tie goes to the less loaded", { a: [2, 0] }, { a: 12, b: 12 }, undefined, 0, "b", "matched"],
    ["a match under 10 % of the prompt does not count", {}, { c: 1 }, undefined, 0, "a", "no_match"],
    ["exactly 10 % counts", {}, { c: 2 }, undefined, 0, "c", "matched"],
    ["within the margin the match still wins", { b: [3, 0] }, { b: 12 }, undefined, 0, "b", "matched"],
    ["queued requests count toward the margin", { b: [2, 2] }, { b: 12 }, undefined, 0, "a", "overloaded"],
    ["beyond the margin: power of two choices", { b: [4, 0] }, { b: 12 }, undefined, 0, "a", "overloaded"],
    ["a replica at its bound is passed over", { b: [8, 0] }, { b: 12 }, undefined, 0, "a", "no_match"],
    ["the session's replica wins over a longer match", {}, { a: 12 }, "d", 0, "d", "session"],
    ["an overloaded session's replica: the match, if calm", { d: [6, 0] }, { a: 12 }, "d", 0, "a", "matched"],
    ["an overloaded session's replica and no match", { d: [6, 0] }, {}, "d", 0, "a", "overloaded"],
    ["a session's replica at its bound is passed over", { d: [8, 0] }, {}, "d", 0, "a", "no_match"],
  ];
  it.each(rows)("%s", (_, loads, matched, session, draw, want, decision) => {
    const draws = [draw / 4, 0];
    const choice = pickByPrefix(
      ["a", "b", "c", "d"],
      (r) => {
        const [inFlight, queued] = loads[r] ?? [0, 0];
        return { inFlight, queued };
      },
      8,
      () => draws.shift() ?? 0,
      { promptBlocks: 20, matched: (r) => matched[r] ?? 0, session },
    );
    expect(choice).toEqual({ replica: want, decision });
  });

  it("none open: no replica", () => {
    const choice = pickByPrefix(["a"], () => ({ inFlight: 2, queued: 0 }), 2, Math.random, {
      promptBlocks: 4,
      matched: () => 4,
      session: undefined,
    });
    expect(choice.replica).toBeUndefined();
  });

  it("costs a few microseconds at 4 replicas", () => {
    const replicas = ["a", "b", "c", "d"];
    const loads = new Map(replicas.map((r, i) => [r, { inFlight: i, queued: 0 }]));
    const hints = { promptBlocks: 60, matched: (r: string) => (r === "c" ? 40 : 0), session: undefined };
    const random = mulberry32(7);
    const n = 100_000;
    const t0 = performance.now();
    for (let i = 0; i < n; i++) pickByPrefix(replicas, (r) => loads.get(r)!, 8, random, hints);
    const us = ((performance.now() - t0) * 1000) / n;
    // The bound is 20 µs; a loaded 2-core machine still stays far inside it.
    expect(us).toBeLessThan(20);
  });

  it("states its policy", () => expect(defaultPrefixPolicy).toEqual({ minShare: 0.1, minBlocks: 1, overloadMargin: 3 }));
});

describe("the prefix index", () => {
  const prompt = (n: number, seed: number) => blockHashes(text(blockChars * n, seed));

  it("matches each replica's leading blocks, stopping at the first block nobody was sent", () => {
    const index = new PrefixIndex(1000);
    const system = text(blockChars * 4, 1);
    const turn1 = blockHashes(system + text(blockChars * 2, 2));
    const turn2 = blockHashes(system + text(blockChars * 2, 2) + text(blockChars * 3, 3));
    index.record(turn1, "r1");
    index.record(blockHashes(system + text(blockChars, 9)), "r2");
    expect(Object.fromEntries(index.matches(turn2))).toEqual({ r1: 6, r2: 4 });
    expect(index.matches(prompt(5, 77)).size).toBe(0);
  });

  it("stays within its block bound, letting the oldest go but keeping a hot prompt's head", () => {
    const index = new PrefixIndex(500);
    const hot = prompt(10, 1);
    for (let i = 0; i < 1000; i++) {
      index.record(prompt(3, 100 + i), "r1");
      if (i % 20 === 0) index.record(hot, "r2");
      expect(index.size).toBeLessThanOrEqual(500);
    }
    expect(index.matches(hot).get("r2")).toBe(10);
  });

  it("holds 100,000 distinct prompts within its memory budget", () => {
    const budget = 2 * 1024 * 1024;
    const routing = new PrefixRouting({ budgetBytes: budget });
    const deployment = target(4);
    const random = mulberry32(5);
    const tail = text(blockChars * 4, 5);
    gc();
    const before = process.memoryUsage().heapUsed;
    for (let i = 0; i < 100_000; i++) {
      // Distinct from the first character, so every block of every prompt is new.
      const body = { messages: [{ role: "user", content: `${i} ${tail}` }] };
      const checked = checkPayload("", Buffer.from(JSON.stringify(body)), InvokeApi.CHAT_COMPLETIONS);
      routing.choose(deployment, deployment.ready, () => ({ inFlight: 0, queued: 0 }), random, routing.promptOf(checked, "k1")!);
    }
    gc();
    const grown = process.memoryUsage().heapUsed - before;
    const held = routing.sizes().reduce((sum, s) => sum + s.blocks, 0);
    // Full: every prompt had 4 blocks, 400,000 in all, and the index kept its budget's worth.
    expect(held).toBe(Math.floor(budget / bytesPerBlock));
    // Measured: the heap grew by no more than the budget, so bytesPerBlock is an honest unit.
    expect(grown).toBeLessThanOrEqual(budget);
    console.log(`prefix index: ${held} blocks in ${grown} bytes, ${(grown / held).toFixed(1)} bytes per block`);
  }, 60_000);

  it("forgets a replica its route no longer lists, and a restarted one (a new runtime)", () => {
    const routing = new PrefixRouting({ budgetBytes: 1024 * 1024 });
    const four = target(4);
    const key = (seed: number) => ({ hashes: prompt(8, seed), session: undefined });
    for (let seed = 0; seed < 40; seed++) routing.choose(four, four.ready, () => ({ inFlight: 0, queued: 0 }), Math.random, key(seed));
    const replicas = () => new Set(routing.sizes().map((s) => s.replica));
    expect(replicas()).toEqual(new Set(["1/0", "1/1", "1/2", "1/3"]));
    // Replica 3 unloaded, replica 2 restarted in a new runtime.
    const after = { ...four, ready: [four.ready[0]!, four.ready[1]!, { ...four.ready[2]!, runtimeId: "rt-2b" }] };
    routing.changed(four.deploymentId, after);
    expect(
      routing
        .sizes()
        .map((s) => s.replica)
        .sort(),
    ).toEqual(["1/0", "1/1"]);
    routing.changed(four.deploymentId, undefined);
    expect(routing.sizes()).toEqual([]);
    expect(routing.knows(four.deploymentId)).toBe(false);
  });

  it("tells apart up to its replica limit; the rest are routed by load", () => {
    const index = new PrefixIndex(10_000);
    for (let r = 0; r < maxIndexedReplicas + 2; r++) index.record(prompt(2, r), `r${r}`);
    expect(index.blocksByReplica().size).toBe(maxIndexedReplicas);
    expect(index.matches(prompt(2, maxIndexedReplicas + 1)).size).toBe(0);
  });

  it("names a session by prompt_cache_key, else user, within its service key", () => {
    const routing = new PrefixRouting({ budgetBytes: 1024 * 1024 });
    const session = (body: Record<string, unknown>, keyId: string) =>
      routing.promptOf(checkPayload("", Buffer.from(JSON.stringify(body)), InvokeApi.CHAT_COMPLETIONS), keyId)!.session;
    const messages = [{ role: "user", content: "hi" }];
    expect(session({ messages }, "k1")).toBeUndefined();
    expect(session({ messages, user: "u1" }, "k1")).toBe(session({ messages, user: "u1" }, "k1"));
    expect(session({ messages, user: "u1" }, "k1")).not.toBe(session({ messages, user: "u1" }, "k2"));
    expect(session({ messages, user: "u1", prompt_cache_key: "c1" }, "k1")).toBe(session({ messages, prompt_cache_key: "c1" }, "k1"));
    expect(routing.promptOf(checkPayload("", Buffer.from(JSON.stringify({ input: "x" })), InvokeApi.EMBEDDINGS), "k1")).toBeUndefined();
  });

  it("keeps a session on its replica, and forgets it with the replica", () => {
    const routing = new PrefixRouting({ budgetBytes: 1024 * 1024 });
    const four = target(4);
    const session = { hashes: [], session: keyHash("chat-42") };
    const first = routing.choose(four, four.ready, () => ({ inFlight: 0, queued: 0 }), mulberry32(1), session)!;
    for (let i = 0; i < 20; i++) {
      expect(routing.choose(four, four.ready, () => ({ inFlight: 0, queued: 0 }), mulberry32(i + 2), session)).toBe(first);
    }
    const without = { ...four, ready: four.ready.filter((r) => r !== first) };
    routing.changed(four.deploymentId, without);
    expect(without.ready).toContain(routing.choose(without, without.ready, () => ({ inFlight: 0, queued: 0 }), Math.random, session));
    expect(identityOf(first)).toBe(`1/${first.replica}/rt-${first.replica}`);
  });
});

function target(replicas: number): DeploymentTarget {
  return {
    deploymentId: "d1",
    name: "tiny",
    phase: "READY",
    createdAt: 0,
    maxInFlight: 8,
    invokeTimeoutMs: 60_000,
    ready: Array.from({ length: replicas }, (_, i) => ({
      revision: 1n,
      replica: i,
      nodeId: `n${i}`,
      phase: "READY" as const,
      engine: "llama.cpp",
      embeddings: false,
      runtimeId: `rt-${i}`,
    })),
  };
}
