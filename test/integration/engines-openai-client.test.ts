import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { closedBeforeAnswer, OpenAiClient, OpenAiClientError } from "../../agent/engines/openai-client.js";

// A runtime's HTTP server on loopback whose handler decides, per request, to answer or to cut the
// connection: how a runtime that closed an idle kept-alive connection looks from the agent.
let server: Server | undefined;
afterEach(async () => {
  // Connections the client keeps alive would hold close() until its idle timer.
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
});

async function runtime(
  handle: (n: number, req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ url: string; requests: () => number }> {
  let n = 0;
  server = createServer((req, res) => {
    n++;
    req.resume();
    req.on("end", () => handle(n, req, res));
  });
  await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, requests: () => n };
}

const answer = (res: ServerResponse) => res.writeHead(200, { "content-type": "application/json" }).end('{"ok":true}');

describe("OpenAiClient against a runtime that cuts a connection before answering", () => {
  it("sends the request once more on a new connection after a reset (RST) or a close (FIN)", async () => {
    for (const cut of ["reset", "close"] as const) {
      const rt = await runtime((n, req, res) => {
        if (n > 1) return answer(res);
        if (cut === "reset") req.socket.resetAndDestroy();
        else req.socket.destroy();
      });
      expect((await new OpenAiClient(rt.url).postRaw("/v1/completions", '{"prompt":"x"}')).toString()).toBe('{"ok":true}');
      expect(rt.requests()).toBe(2);
      await new Promise<void>((resolve) => server!.close(() => resolve()));
      server = undefined;
    }
  });

  it("sends it once more on a connection of its own, not on another kept-alive one", async () => {
    const rt = await runtime((n, req, res) => (n === 3 ? req.socket.resetAndDestroy() : answer(res)));
    let connections = 0;
    server!.on("connection", () => connections++);
    const client = new OpenAiClient(rt.url);
    // Two connections kept alive, then the third request is cut on one of them.
    await Promise.all([client.postRaw("/v1/completions", "{}"), client.postRaw("/v1/completions", "{}")]);
    expect(connections).toBe(2);
    expect((await client.postRaw("/v1/completions", "{}")).toString()).toBe('{"ok":true}');
    expect([rt.requests(), connections]).toEqual([4, 3]);
  });

  it("gives up after the second cut with the connection's own error", async () => {
    const rt = await runtime((_n, req) => req.socket.resetAndDestroy());
    await expect(new OpenAiClient(rt.url).postRaw("/v1/completions", "{}")).rejects.toMatchObject({ code: "ECONNRESET" });
    expect(rt.requests()).toBe(2);
  });

  it("does not resend what the runtime answered, even with an error", async () => {
    const rt = await runtime((_n, _req, res) =>
      res.writeHead(500, { "content-type": "application/json" }).end('{"error":{"message":"boom","type":"server_error"}}'),
    );
    await expect(new OpenAiClient(rt.url).postRaw("/v1/completions", "{}")).rejects.toBeInstanceOf(OpenAiClientError);
    expect(rt.requests()).toBe(1);
  });

  it("does not resend a stream cut after its answer began", async () => {
    const rt = await runtime((_n, req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write('data: {"n":1}\n\n', () => setTimeout(() => req.socket.resetAndDestroy(), 20));
    });
    const seen: string[] = [];
    await expect(
      (async () => {
        await new OpenAiClient(rt.url).streamRaw("/v1/completions", "{}", (data) => seen.push(data));
      })(),
    ).rejects.toThrow();
    expect(seen).toEqual(['{"n":1}']);
    expect(rt.requests()).toBe(1);
  });

  it("does not resend once the caller has given up", async () => {
    const caller = new AbortController();
    const rt = await runtime((_n, req) => {
      caller.abort(new Error("cancelled"));
      req.socket.resetAndDestroy();
    });
    await expect(new OpenAiClient(rt.url).postRaw("/v1/completions", "{}", caller.signal)).rejects.toThrow();
    expect(rt.requests()).toBe(1);
  });
});

describe("closedBeforeAnswer", () => {
  const failed = (code?: string) =>
    new TypeError("fetch failed", code === undefined ? undefined : { cause: Object.assign(new Error(code), { code }) });
  const socket = (code: string) => Object.assign(new Error("socket hang up"), { code });
  it.each([
    ["a reset", failed("ECONNRESET"), true],
    ["a reset (node:http)", socket("ECONNRESET"), true],
    ["a broken pipe (node:http)", socket("EPIPE"), true],
    ["a refused connection (node:http)", socket("ECONNREFUSED"), false],
    ["an HTTP refusal whose OpenAI code reads like a socket's", new OpenAiClientError(502, "server_error", "ECONNRESET", "boom"), false],
    ["a broken pipe", failed("EPIPE"), true],
    ["a close before the answer", failed("UND_ERR_SOCKET"), true],
    ["a refused connection (the runtime is gone)", failed("ECONNREFUSED"), false],
    ["a fetch failure without a cause", failed(), false],
    ["a timeout", new DOMException("timed out", "TimeoutError"), false],
    ["an HTTP refusal", new OpenAiClientError(500, "server_error", undefined, "boom"), false],
  ])("%s: %s", (_name, err, expected) => {
    expect(closedBeforeAnswer(err)).toBe(expected);
  });
});

describe("a runtime's server-sent events, however framed", () => {
  // As a proxy in front of an openai-http upstream may frame them: each event written in pieces
  // split anywhere, so the parser meets every line ending across writes too.
  it.each([
    ["LF", "\n"],
    ["CRLF", "\r\n"],
    ["CR", "\r"],
  ])("reads events whose lines end in %s, written a few bytes at a time", async (_what, eol) => {
    const events = [
      `data: {"n":1}${eol}${eol}`,
      `: a comment${eol}data: {"n":2}${eol}${eol}`,
      `event: x${eol}data: {"n":3}${eol}${eol}`,
      `data: [DONE]${eol}${eol}`,
    ];
    const text = events.join("");
    const rt = await runtime(async (_n, _req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      for (let at = 0; at < text.length; at += 3) {
        res.write(text.slice(at, at + 3));
        await new Promise((r) => setImmediate(r));
      }
      res.end();
    });
    const seen: string[] = [];
    await new OpenAiClient(rt.url).streamRaw("/v1/completions", "{}", (data) => seen.push(data));
    expect(seen).toEqual(['{"n":1}', '{"n":2}', '{"n":3}']);
  });

  it("keeps the connection of a stream whose [DONE] came before its body's end", async () => {
    let ended = Promise.resolve();
    const rt = await runtime((_n, _req, res) => {
      ended = new Promise((resolve) => res.once("finish", resolve));
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write('data: {"n":1}\n\ndata: [DONE]\n\n', () => setTimeout(() => res.end(), 50));
    });
    let connections = 0;
    server!.on("connection", () => connections++);
    const client = new OpenAiClient(rt.url);
    for (let i = 0; i < 3; i++) {
      const seen: string[] = [];
      await client.streamRaw("/v1/completions", "{}", (data) => seen.push(data));
      expect(seen).toEqual(['{"n":1}']);
      // The body's end is on loopback once the server finished: a turn of the loop later the client has read it.
      await ended;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect([rt.requests(), connections]).toEqual([3, 1]);
  });

  it("refuses an event past the size limit, and a stream that ends without [DONE]", async () => {
    const huge = await runtime((_n, _req, res) =>
      res.writeHead(200, { "content-type": "text/event-stream" }).end(`data: ${"x".repeat(1024 * 1024 + 1)}`),
    );
    await expect(
      (async () => {
        await new OpenAiClient(huge.url).streamRaw("/v1/completions", "{}", () => undefined);
      })(),
    ).rejects.toThrow(/exceeds the size limit/);
    await new Promise<void>((resolve) => server!.close(() => resolve()));
    const cut = await runtime((_n, _req, res) => res.writeHead(200, { "content-type": "text/event-stream" }).end('data: {"n":1}\r\n\r\n'));
    await expect(
      (async () => {
        await new OpenAiClient(cut.url).streamRaw("/v1/completions", "{}", () => undefined);
      })(),
    ).rejects.toThrow(/without \[DONE\]/);
  });
});
