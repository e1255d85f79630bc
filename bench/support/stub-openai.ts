// Bench-only: the trivial runtime of bench/invoke.ts and bench/openai.ts. A tiny OpenAI-compatible
// HTTP server on loopback whose answers cost nothing, so the benchmark measures the relay, not
// inference: a fixed completion, or a stream of `max_tokens` chunks (3 when not given) written at a
// fixed pace, the first at once. Started as `stub-openai.ts --port N [--pace-ms M]`.
import { createServer, type ServerResponse } from "node:http";

const option = (name: string) => {
  const at = process.argv.indexOf(name);
  return at < 0 ? undefined : process.argv[at + 1];
};
const port = Number(option("--port"));
const paceMs = Number(option("--pace-ms") ?? 0);
/** A stream's chunks, bounded: a bench asks for hundreds, never more. */
const maxChunks = 10_000;
const answer = JSON.stringify({
  id: "cmpl-stub",
  object: "text_completion",
  created: 0,
  model: "stub",
  choices: [{ index: 0, text: " jumps", finish_reason: "stop", logprobs: null }],
  usage: { prompt_tokens: 4, completion_tokens: 1, total_tokens: 5 },
});

createServer((req, res) => {
  if (req.method === "GET") {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(req.url === "/health" ? '{"status":"ok"}' : '{"object":"list","data":[]}');
    return;
  }
  let body = "";
  req.on("data", (c: Buffer) => (body += c.toString()));
  req.on("end", () => {
    const asked = JSON.parse(body || "{}") as { stream?: boolean; max_tokens?: number };
    if (asked.stream !== true) {
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(answer) });
      res.end(answer);
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream" });
    const chunks = Math.min(maxChunks, Math.max(1, Math.floor(asked.max_tokens ?? 3)));
    paced(res, chunks, performance.now());
  });
}).listen(port, "127.0.0.1");

/** Chunk i at start + i × pace (not pace after the previous one), so a late timer does not slow the stream. */
function paced(res: ServerResponse, chunks: number, start: number, sent = 0): void {
  while (sent < chunks && performance.now() >= start + sent * paceMs) {
    const last = sent === chunks - 1;
    res.write(
      `data: ${JSON.stringify({ id: "cmpl-stub", object: "text_completion", choices: [{ index: 0, text: " tok", finish_reason: last ? "stop" : null }] })}\n\n`,
    );
    sent++;
  }
  if (sent === chunks) {
    res.end("data: [DONE]\n\n");
    return;
  }
  if (res.destroyed) return;
  setTimeout(() => paced(res, chunks, start, sent), Math.max(0, start + sent * paceMs - performance.now()));
}
