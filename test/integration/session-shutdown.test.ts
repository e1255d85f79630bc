// A control plane stopping ends every Session with `unavailable` (the agent retries), and says so
// once: each session it ends is a debug line, not a warning per node.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode } from "../support/node.js";
import { agentVersion } from "../../agent/version.js";

let ts: TestServer | undefined;
beforeAll(async () => {
  ts = await startTestServer();
}, 60_000);
afterAll(async () => {
  await ts?.stop();
});

describe("a Session when the server stops", () => {
  it("ends with unavailable, logged as a debug line under one 'shutting down'", async () => {
    const server = ts!;
    const nodes = await Promise.all(["stopping-a", "stopping-b"].map((name) => enrollTestNode(server, name)));
    const ended = nodes.map(async (node) => {
      const client = await node.client();
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      const outbound = (async function* () {
        yield { messageId: 1n, message: { case: "hello" as const, value: { protocolVersion: 1, agentVersion } } };
        await held; // the agent's side stays open until the server ends the call
      })();
      const seen: string[] = [];
      try {
        for await (const res of client.session(outbound)) seen.push(res.message.case ?? "");
        return { seen, code: undefined, message: "" };
      } catch (err) {
        const ce = ConnectError.from(err);
        return { seen, code: ce.code, message: ce.rawMessage };
      } finally {
        release();
      }
    });
    await server.logFeed.waitForMatch(/"msg":"session opened"[\s\S]*"msg":"session opened"/, { what: "both sessions open" });
    await server.stop();
    ts = undefined;
    for (const result of await Promise.all(ended)) {
      expect(result).toEqual({ seen: ["welcome"], code: Code.Unavailable, message: "server shutting down" });
    }
    const lines = server
      .logs()
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as { level: number; msg: string; message?: string });
    // pino's levels: 40 warn, 30 info, 20 debug.
    expect(lines.filter((l) => l.msg === "shutting down").map((l) => l.level)).toEqual([30]);
    expect(lines.filter((l) => l.message === "server shutting down").map((l) => `${l.level} ${l.msg}`)).toEqual([
      "20 rpc refused",
      "20 rpc refused",
    ]);
  }, 60_000);
});
