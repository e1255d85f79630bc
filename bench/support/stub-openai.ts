// Bench-only: the trivial runtime of bench/invoke.ts. A tiny OpenAI-compatible HTTP server on
// loopback whose answers cost nothing (a fixed completion, or three stream chunks), so the
// benchmark measures the relay, not inference. Started as `stub-openai.ts --port N`.
import { createServer } from "node:http";

const port = Number(process.argv[process.argv.indexOf("--port") + 1]);
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
    const stream = (JSON.parse(body || "{}") as { stream?: boolean }).stream === true;
    if (!stream) {
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(answer) });
      res.end(answer);
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream" });
    for (const text of [" jumps", " over", ""]) {
      res.write(
        `data: ${JSON.stringify({ id: "cmpl-stub", object: "text_completion", choices: [{ index: 0, text, finish_reason: text === "" ? "stop" : null }] })}\n\n`,
      );
    }
    res.end("data: [DONE]\n\n");
  });
}).listen(port, "127.0.0.1");
