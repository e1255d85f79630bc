// The cold-start hold with a manual clock and a route the test moves: requests wait in arrival
// order and are released together once a replica is ready; at zero the first asks for a replica
// once; the count, the timeout, a caller leaving and a stopping control plane each end a wait.
import { describe, expect, it } from "vitest";
import { Code, type ConnectError } from "@connectrpc/connect";
import { ManualClock } from "../../common/clock.js";
import { ColdStarts } from "../../server/invoke/cold-start.js";
import type { DeploymentTarget } from "../../server/deployments/routes.js";
import { createLogger } from "../../server/observability/logger.js";

const target = (replicas: number, ready: number, coldStart = true): DeploymentTarget => ({
  deploymentId: "d-1",
  name: "chat",
  phase: ready > 0 ? "READY" : "PENDING",
  createdAt: 0,
  maxInFlight: 8,
  invokeTimeoutMs: 60_000,
  ready: Array.from({ length: ready }, (_, i) => ({
    revision: 1n,
    replica: i,
    nodeId: `n-${i}`,
    phase: "READY" as const,
    engine: "llama.cpp",
    embeddings: false,
    runtimeId: `rt-${i}`,
  })),
  ...(coldStart ? { coldStart: { timeoutMs: 10_000, replicas } } : {}),
});

function setup(maxHeld = 3) {
  const clock = new ManualClock(1_000_000);
  let route: DeploymentTarget | undefined = target(0, 0);
  const listeners: ((id: string) => void)[] = [];
  const wakes: string[] = [];
  const holds = new ColdStarts({
    clock,
    log: createLogger("silent"),
    routes: {
      find: async () => route,
      onChange: (l) => {
        listeners.push(l);
        return () => listeners.splice(listeners.indexOf(l), 1);
      },
    },
    wake: async (t) => {
      wakes.push(t.name);
      return true;
    },
    maxHeld,
    keepAliveMs: 1_000,
  });
  return {
    clock,
    holds,
    wakes,
    listeners,
    /** Moves the route without a word. */
    setRoute(next: DeploymentTarget | undefined) {
      route = next;
    },
    /** Moves the route and announces it, as the cluster bus does. */
    announce(next: DeploymentTarget | undefined) {
      route = next;
      for (const l of [...listeners]) l("d-1");
    },
  };
}

const settle = () => new Promise((r) => setImmediate(r));
const wait = (holds: ColdStarts, signal = new AbortController().signal, whileHeld?: () => void) =>
  holds.wait(target(0, 0) as DeploymentTarget & { coldStart: { timeoutMs: number; replicas: number } }, {
    timeoutMs: undefined,
    signal,
    whileHeld,
  });

describe("ColdStarts", () => {
  it("holds in order until a replica is ready, asks for one once, and stops watching after", async () => {
    const s = setup();
    const order: number[] = [];
    const waits = [0, 1, 2].map((i) =>
      wait(s.holds).then((t) => {
        order.push(i);
        return t;
      }),
    );
    expect(s.holds.heldOf("d-1")).toBe(3);
    await settle();
    expect(s.wakes).toEqual(["chat"]);
    s.announce(target(1, 0));
    await settle();
    expect(order).toEqual([]);
    s.announce(target(1, 1));
    const released = await Promise.all(waits);
    expect(order).toEqual([0, 1, 2]);
    expect(released.every((t) => t!.ready.length === 1)).toBe(true);
    expect(s.holds.heldOf("d-1")).toBe(0);
    expect(s.listeners).toHaveLength(0);
  });

  it("finds the replica by its poll when an announcement is lost", async () => {
    const s = setup();
    const held = wait(s.holds);
    await settle();
    s.setRoute(target(1, 1));
    await settle();
    expect(s.holds.heldOf("d-1")).toBe(1);
    s.clock.advance(1_000);
    await expect(held).resolves.toMatchObject({ ready: [{ replica: 0 }] });
  });

  it("refuses past the count at once, unavailable with Retry-After", async () => {
    const s = setup(2);
    void wait(s.holds).catch(() => undefined);
    void wait(s.holds).catch(() => undefined);
    const err = await wait(s.holds).then(
      () => undefined,
      (e: unknown) => e as ConnectError,
    );
    expect(err?.code).toBe(Code.Unavailable);
    expect(err?.rawMessage).toBe("deployment chat already has 2 requests waiting for a replica to load: retry later");
    expect(err?.metadata.get("retry-after")).toBe("5");
  });

  it("ends a wait at the cold-start timeout, and keeps it alive until then", async () => {
    const s = setup();
    let beats = 0;
    const held = wait(s.holds, undefined, () => (beats += 1)).then(
      () => undefined,
      (e: unknown) => e as ConnectError,
    );
    for (let t = 0; t < 9; t++) s.clock.advance(1_000);
    expect(beats).toBe(9);
    s.clock.advance(1_000);
    const err = await held;
    expect(err?.code).toBe(Code.Unavailable);
    expect(err?.rawMessage).toBe("deployment chat has no ready replica after waiting 10 s for one to load: retry later");
    s.clock.advance(5_000);
    expect(beats).toBe(9);
    expect(s.holds.heldOf("d-1")).toBe(0);
  });

  it("drops a caller that goes away, and frees its place", async () => {
    const s = setup(1);
    const leaving = new AbortController();
    const held = wait(s.holds, leaving.signal).then(
      () => undefined,
      (e: unknown) => e as ConnectError,
    );
    leaving.abort();
    expect((await held)?.code).toBe(Code.Canceled);
    expect(s.holds.heldOf("d-1")).toBe(0);
    // One gone before it was held is not held at all.
    await expect(wait(s.holds, leaving.signal)).rejects.toMatchObject({ code: Code.Canceled });
    expect(s.holds.heldOf("d-1")).toBe(0);
    const next = wait(s.holds);
    s.announce(target(1, 1));
    await expect(next).resolves.toBeDefined();
  });

  it("answers every waiter retryably when the control plane stops, and refuses new ones", async () => {
    const s = setup();
    const held = [wait(s.holds), wait(s.holds)].map((p) =>
      p.then(
        () => undefined,
        (e: unknown) => e as ConnectError,
      ),
    );
    s.holds.stop();
    for (const err of await Promise.all(held)) {
      expect(err?.code).toBe(Code.Unavailable);
      expect(err?.rawMessage).toMatch(/shutting down: retry on another replica/);
    }
    await expect(wait(s.holds)).rejects.toThrow(/shutting down/);
  });

  it("lets waiters go when the deployment stops waiting for a replica (drained, autoscaling off, deleted)", async () => {
    const s = setup();
    const held = wait(s.holds);
    s.announce(target(1, 0, false));
    await expect(held).resolves.toMatchObject({ ready: [] });
    const gone = wait(s.holds);
    s.announce(undefined);
    await expect(gone).resolves.toBeUndefined();
  });
});
