// The supervisor's lifecycle on real processes: stop frees the process, a crash is detected, an
// external OpenAI-compatible server runs from the operator's template, a runtime that never gets
// healthy or fails to load is refused and cleaned up, and a later agent stops the runtimes an
// earlier one left behind (but never a process that merely reused a pid).
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { EngineError, llamaServerPath, Supervisor } from "../../agent/engines/supervisor.js";
import { readStat } from "../../agent/engines/proc.js";
import type { OpenAiHttpTemplate } from "../../agent/engines/openai-http.js";
import { tinyLlamaGguf, writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { defaultLogLimits, LogTail } from "../../agent/deployments/logs.js";
import { LogStream, type RuntimeLogLine } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { waitFor } from "../support/wait.js";

const dir = mkdtempSync(join(tmpdir(), "mf-supervisor-"));
const modelPath = join(dir, "tiny.gguf");
let registryPath = "";
const supervisors: Supervisor[] = [];
const load = { healthDeadlineMs: 120_000 };

function supervisor(extra: Partial<ConstructorParameters<typeof Supervisor>[0]> = {}): Supervisor {
  const s = new Supervisor({ registryPath, stopGraceMs: 5_000, ...extra });
  supervisors.push(s);
  return s;
}

const alive = async (pid: number) => (await readStat(pid)) !== undefined;

beforeAll(async () => {
  await writeTinyLlamaGguf(modelPath);
});
// Each test its own registry: what one test leaves cannot look like another's orphan.
let tests = 0;
beforeEach(() => {
  registryPath = join(dir, `runtimes-${++tests}.json`);
});
afterEach(async () => {
  for (const s of supervisors.splice(0)) await s.stopAll();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// Each test starts real runtime processes (a few seconds each on a busy machine).
describe("supervisor", { timeout: 180_000 }, () => {
  it("stops a runtime: the process is gone and the registry forgets it", async () => {
    const s = supervisor();
    const r = await s.start("llama.cpp", { modelPath, ...load });
    expect(await alive(r.pid)).toBe(true);
    expect(JSON.parse(readFileSync(registryPath, "utf8")).runtimes.map((x: { pid: number }) => x.pid)).toContain(r.pid);
    const exit = await s.stop(r.id);
    expect(exit.stopped).toBe(true);
    expect(await alive(r.pid)).toBe(false);
    expect(s.list()).toEqual([]);
    expect(JSON.parse(readFileSync(registryPath, "utf8")).runtimes).toEqual([]);
    await expect(s.health(r.id)).rejects.toMatchObject({ code: "runtime_not_found" });
  });

  it("detects a crashed runtime", async () => {
    const s = supervisor();
    const r = await s.start("llama.cpp", { modelPath, ...load });
    process.kill(r.pid, "SIGKILL");
    const exit = await r.exited;
    expect(exit).toEqual({ code: null, signal: "SIGKILL", stopped: false });
    expect(await s.health(r.id)).toEqual({ state: "exited", exit });
    expect(await r.memory()).toBeUndefined();
    expect(await s.stop(r.id)).toEqual(exit);
  });

  it("runs an external OpenAI-compatible server from the operator's argv template", async () => {
    // llama-server itself, as an operator would run it: any OpenAI-compatible server will do.
    const template: OpenAiHttpTemplate = {
      command: [llamaServerPath, "--model", "{model}", "--host", "{host}", "--port", "{port}", "--threads", "{threads}", "--no-webui"],
    };
    const s = supervisor({ openAiHttp: template });
    expect(s.engines()).toEqual(["llama.cpp", "openai-http"]);
    const r = await s.start("openai-http", { modelPath, params: { threads: 1 }, ...load });
    expect(r.backend).toBeUndefined();
    expect(await s.health(r.id)).toEqual({ state: "healthy" });
    const models = await r.client.models();
    expect(models.data[0]!.id).toBe(modelPath);
    const out = await r.client.completion("external", { max_tokens: 4, temperature: 0 });
    expect(out.usage!.completion_tokens).toBeGreaterThan(0);
    await s.stop(r.id);
    expect(await alive(r.pid)).toBe(false);
  });

  it("labels a runtime's log lines by the stream it wrote them to", async () => {
    // An external server that says one thing on each stream, and answers health checks.
    const server = [
      'process.stdout.write("listening, on stdout\\n");',
      'process.stderr.write("a warning, on stderr\\n");',
      'require("node:http").createServer((q, s) => s.end("ok")).listen(Number(process.argv[2]), "127.0.0.1");',
    ].join("");
    const template: OpenAiHttpTemplate = { command: [process.execPath, "-e", server, "{model}", "{port}"] };
    const lines: RuntimeLogLine[] = [];
    const tail = new LogTail(1n, defaultLogLimits, Date.now, (line) => lines.push(line));
    const s = supervisor({ openAiHttp: template });
    const onOutput = (stream: "stdout" | "stderr", chunk: Buffer) => tail.write(stream, chunk);
    await s.start("openai-http", { modelPath, onOutput, ...load });
    await waitFor(() => lines.length >= 2, { what: () => `two log lines, got ${JSON.stringify(lines.map((l) => l.text))}` });
    expect(lines.map((l) => [LogStream[l.stream], l.text]).sort()).toEqual([
      ["STDERR", "a warning, on stderr"],
      ["STDOUT", "listening, on stdout"],
    ]);

    // The llama.cpp runtime's log is llama-server's own, each line under the stream it wrote it to.
    lines.length = 0;
    const r = await s.start("llama.cpp", { modelPath, onOutput, ...load });
    await r.client.completion("a logged request", { max_tokens: 1, temperature: 0 });
    await waitFor(() => lines.find((l) => /listening on http:\/\/127\.0\.0\.1:\d+/.test(l.text)), {
      what: "llama-server's listening line",
    });
    await waitFor(() => lines.find((l) => l.text.includes("prompt eval time")), { what: "the request's timing line" });
  });

  it("a llama.cpp runtime given GPUs where CUDA is not usable runs on the CPU, and says so once", async () => {
    // This install carries no CUDA build (package.json overrides): the runtime falls back.
    const stderr: string[] = [];
    const onOutput = (stream: "stdout" | "stderr", chunk: Buffer) => stream === "stderr" && stderr.push(chunk.toString());
    const s = supervisor();
    const gpus = [{ uuid: "GPU-fake", index: 0 }];
    const r = await s.start("llama.cpp", { modelPath, params: { gpuLayers: "all", threads: 1 }, gpus, onOutput, ...load });
    expect(r.backend).toBe("cpu");
    const fallbacks = stderr
      .join("")
      .split("\n")
      .filter((l) => l.includes("running on the CPU"));
    expect(fallbacks).toEqual(["modelforge: running on the CPU: no CUDA build in this install"]);
    const out = await r.client.completion("on the cpu", { max_tokens: 2, temperature: 0 });
    expect(out.usage!.completion_tokens).toBeGreaterThan(0);
    // Without GPUs it never asks for CUDA.
    const cpu = await s.start("llama.cpp", { modelPath, params: { gpuLayers: "all", threads: 1 }, ...load });
    expect(cpu.backend).toBe("cpu");
  });

  it("advertises llama.cpp's CUDA backend only when it has one", () => {
    expect(supervisor().advertisedEngines()).toEqual(["llama.cpp"]);
    expect(supervisor({ llamaCuda: true }).advertisedEngines()).toEqual(["llama.cpp", "llama.cpp+cuda"]);
  });

  it("offers openai-http only when the operator configured a template", async () => {
    const s = supervisor();
    expect(s.engines()).toEqual(["llama.cpp"]);
    await expect(s.start("openai-http", { modelPath })).rejects.toMatchObject({ code: "engine_not_supported" });
  });

  it("refuses bad inputs before starting anything", async () => {
    const s = supervisor();
    const cases: [string, object, string][] = [
      ["relative", { modelPath: "tiny.gguf" }, "invalid_params"],
      ["dot-dot", { modelPath: `${dir}/../x/tiny.gguf` }, "invalid_params"],
      ["missing", { modelPath: join(dir, "missing.gguf") }, "model_not_found"],
      ["directory", { modelPath: dir }, "model_not_found"],
      ["threads", { modelPath, params: { threads: 0 } }, "invalid_params"],
      ["context", { modelPath, params: { contextSize: 1.5 } }, "invalid_params"],
    ];
    for (const [what, options, code] of cases) {
      const err = await s.start("llama.cpp", options as { modelPath: string }).catch((e: unknown) => e);
      expect({ what, code: (err as EngineError).code }).toEqual({ what, code });
    }
  });

  it("reports a model that fails to load, and leaves no process behind", async () => {
    const { bytes } = tinyLlamaGguf();
    // Counts that cannot fit the file: llama.cpp's reader spun on such a header; refused fast.
    const impossible = Buffer.alloc(64);
    impossible.write("GGUF", 0, "latin1");
    impossible.writeUInt32LE(3, 4);
    impossible.writeBigUInt64LE(1n << 40n, 8);
    // Whole and plausible, of an architecture llama.cpp does not know: llama-server itself exits.
    // Its log thread may lose the lines that say why at exit, so only the exit is matched.
    const archAt = bytes.indexOf(Buffer.from("general.architecture", "latin1"));
    const unknownArch = Buffer.from(bytes);
    const valueAt = unknownArch.indexOf(Buffer.from("llama", "latin1"), archAt + "general.architecture".length);
    unknownArch.write("llamb", valueAt, "latin1");
    const cases: [string, Buffer, RegExp][] = [
      // Refused before llama-server starts, by the reason llama-server's lost lines gave.
      ["truncated", bytes.subarray(0, bytes.length >> 1), /the file is truncated: its tensors end at byte \d+, and it has \d+/],
      ["unknown architecture", unknownArch, /the llama\.cpp runtime exited before it was ready \(code [1-9]\d*, signal none\)/],
      ["not gguf", Buffer.from("not a model at all, not even close"), /not GGUF/],
      ["impossible header", impossible, /cannot fit/],
    ];
    const s = supervisor();
    for (const [name, content, reason] of cases) {
      const bad = join(dir, `bad-${name.replace(/ /g, "-")}.gguf`);
      writeFileSync(bad, content);
      const err = (await s.start("llama.cpp", { modelPath: bad, ...load }).catch((e: unknown) => e)) as EngineError;
      expect(err).toBeInstanceOf(EngineError);
      expect({ name, code: err.code }).toEqual({ name, code: "exited_before_ready" });
      expect(err.message).toMatch(reason);
    }
    expect(s.list()).toEqual([]);
    expect(JSON.parse(readFileSync(registryPath, "utf8")).runtimes).toEqual([]);
  });

  it("reports an external server that cannot be started", async () => {
    const s = supervisor({ openAiHttp: { command: [join(dir, "no-such-server"), "--model", "{model}", "--port", "{port}"] } });
    const err = (await s.start("openai-http", { modelPath }).catch((e: unknown) => e)) as EngineError;
    expect(err.code).toBe("process_failed_to_start");
    expect(s.list()).toEqual([]);
  });

  it("stops a runtime that is not healthy by the deadline", async () => {
    // An external "server" that never listens: the health deadline passes and it is stopped.
    const template: OpenAiHttpTemplate = { command: [process.execPath, "-e", "setInterval(Date.now, 1000)", "{port}", "{model}"] };
    const s = supervisor({ openAiHttp: template });
    const err = (await s.start("openai-http", { modelPath, healthDeadlineMs: 1_000 }).catch((e: unknown) => e)) as EngineError;
    expect(err.code).toBe("health_deadline_exceeded");
    expect(s.list()).toEqual([]);
    expect(JSON.parse(readFileSync(registryPath, "utf8")).runtimes).toEqual([]);
  });

  it("a later agent stops the runtimes an earlier one left, and only those", async () => {
    // The earlier agent is a real process that starts a runtime, then dies by SIGKILL: no goodbye.
    const earlier = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "--input-type=module",
        "-e",
        `const { Supervisor } = await import(process.argv[1]);
         const r = await new Supervisor({ registryPath: process.argv[2] }).start("llama.cpp", { modelPath: process.argv[3] });
         process.stdout.write(JSON.stringify({ id: r.id, pid: r.pid }) + "\\n");
         setInterval(Date.now, 1000);`,
        fileURLToPath(new URL("../../agent/engines/supervisor.ts", import.meta.url)),
        registryPath,
        modelPath,
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    const left = await new Promise<{ id: string; pid: number }>((resolve, reject) => {
      let out = "";
      earlier.stdout!.on("data", (c: Buffer) => {
        out += c.toString();
        if (out.includes("\n")) resolve(JSON.parse(out));
      });
      earlier.once("exit", (code) => reject(new Error(`the earlier agent exited with ${code}`)));
    });
    earlier.kill("SIGKILL");
    await new Promise((r) => earlier.once("exit", r));
    expect(await alive(left.pid)).toBe(true);
    // A process that ended on its own, and a live process whose pid a record names with another
    // start time (pid reuse): neither may be signalled.
    const ended = spawn(process.execPath, ["-e", ""]);
    await new Promise((r) => ended.once("exit", r));
    const bystander = spawn(process.execPath, ["-e", "setInterval(Date.now, 1000)"]);
    const records = JSON.parse(readFileSync(registryPath, "utf8")).runtimes as object[];
    const fake = (id: string, pid: number, startTicks: number) => ({
      id,
      engine: "llama.cpp",
      pid,
      startTicks,
      modelPath,
      startedAt: new Date().toISOString(),
    });
    const bystanderTicks = (await readStat(bystander.pid!))!.startTicks;
    records.push(fake("ended", ended.pid!, 1), fake("reused", bystander.pid!, bystanderTicks + 1));
    writeFileSync(registryPath, JSON.stringify({ runtimes: records }));
    try {
      const later = supervisor();
      const reports = await later.reapOrphans();
      const outcome = Object.fromEntries(reports.map((r) => [r.record.id, r.outcome]));
      expect(outcome).toEqual({ [left.id]: "stopped", ended: "gone", reused: "gone" });
      expect(await alive(left.pid)).toBe(false);
      expect(await alive(bystander.pid!)).toBe(true);
      expect(JSON.parse(readFileSync(registryPath, "utf8")).runtimes).toEqual([]);
      expect(await later.reapOrphans()).toEqual([]);
    } finally {
      bystander.kill("SIGKILL");
      if (await alive(left.pid)) process.kill(-left.pid, "SIGKILL");
    }
  });
});
