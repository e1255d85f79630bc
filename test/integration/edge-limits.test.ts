// Bounded input at the edge, tried as an attacker would: huge bodies (streamed, or declared in
// content-length) without credentials, over-limit requests with them, bodies of unknown fields,
// in every protocol the port speaks. The server runs as its own process, so its resident memory is
// its own and not the test's.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type http2 from "node:http2";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoRoot, spawnServer, type ServerProcess } from "../support/process.js";
import { call, connect as connectTo, emptyJson } from "../support/raw-call.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { drainLimits } from "../../server/edge/drain.js";

const adminKey = "edge-test-admin-key-0123456789";
const listNodes = "/modelforge.admin.v1.AdminService/ListNodes";
const getServerInfo = "/modelforge.agent.v1.AgentService/GetServerInfo";
const enroll = "/modelforge.agent.v1.AgentService/Enroll";
const MiB = 1024 * 1024;
const attackBytes = 300 * MiB;

const protocols = {
  "Connect proto": "application/proto",
  "Connect JSON": "application/json",
  gRPC: "application/grpc",
  "gRPC-Web": "application/grpc-web+proto",
} as const;

let server: ServerProcess;
let db: TestDatabase;
let dir: string;
let url: string;
let ca: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "mf-edge-"));
  db = await createTestDatabase();
  server = spawnServer({
    MODELFORGE_DATA_DIR: db.dataDir,
    MODELFORGE_CERTS_DIR: join(dir, "certs"),
    MODELFORGE_OPERATOR_API_KEY: adminKey,
    ...(db.databaseUrl !== undefined ? { DATABASE_URL: db.databaseUrl } : {}),
  });
  url = await server.ready;
  ca = readFileSync(join(dir, "certs", "ca.crt"), "utf8");
  // Warm-up, so the time limits below measure a refusal, not the first call's compilation.
  const session = await connect();
  for (const contentType of Object.values(protocols)) await call(session, listNodes, contentType, { bytes: 1024 });
  session.destroy();
});

afterAll(async () => {
  if (server.child.exitCode === null) {
    server.child.kill("SIGTERM");
    await server.exited;
  }
  await db.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

/** The server process's resident set, from /proc; infinite once the process is gone. */
function serverRss(): number {
  let status = "";
  try {
    status = readFileSync(`/proc/${server.child.pid}/status`, "utf8");
  } catch {
    // Gone: the server died.
  }
  const kb = /VmRSS:\s+(\d+) kB/.exec(status)?.[1];
  return kb === undefined ? Infinity : Number(kb) * 1024;
}

/** Samples the server's RSS until stopped; returns the highest value seen. */
function watchRss(): () => number {
  let peak = serverRss();
  const timer = setInterval(() => (peak = Math.max(peak, serverRss())), 20);
  return () => {
    clearInterval(timer);
    return Math.max(peak, serverRss());
  };
}

const connect = () => connectTo(url, ca);

function p99(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.99) - 1)]!;
}

async function serverInfoLatencies(session: http2.ClientHttp2Session, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const a = await call(session, getServerInfo, "application/json", emptyJson);
    expect(a.code).toBe("ok");
    out.push(a.ms);
  }
  return out;
}

describe("request bodies are bounded at the edge", () => {
  it.each(Object.entries(protocols))(
    "a streamed 300 MB body to ListNodes without a token is refused once the drain's bound is read (%s)",
    async (_name, contentType) => {
      const session = await connect();
      try {
        const peak = watchRss();
        const before = serverRss();
        const answer = await call(session, listNodes, contentType, { bytes: attackBytes });
        expect(["resource_exhausted", "unauthenticated"]).toContain(answer.code);
        // The server reads what is left up to its drain bound before answering (server/edge/drain.ts):
        // 16 MiB over loopback TLS took up to 1.4 s on a busy machine, so the bound is loose.
        expect(answer.ms).toBeLessThan(10_000);
        // Then it reset the stream, so the client stopped pushing long before 300 MB: what it
        // handed over is the drain bound and the flow-control windows in flight.
        expect(await answer.closed).toBe(true);
        expect(answer.sent).toBeLessThan(drainLimits.bytes + 4 * MiB);
        expect(peak() - before).toBeLessThan(64 * MiB);
      } finally {
        session.destroy();
      }
    },
  );

  it.each(Object.entries(protocols))(
    "a declared 300 MB content-length is refused before the body is read (%s)",
    async (_name, contentType) => {
      const session = await connect();
      try {
        // No body follows the declaration (bar gRPC's 5-byte prefix) and the request stays open: an
        // answer can come only from the header.
        const answer = await call(
          session,
          listNodes,
          contentType,
          { bytes: 0, declared: attackBytes, open: true },
          { "x-modelforge-admin-token": adminKey },
        );
        expect(answer.code).toBe("resource_exhausted");
        expect(answer.message).toMatch(/limit|readMaxBytes/);
        // The server has no request timeout, so a server waiting for the body would never answer;
        // the bound is loose because the proof is the answer itself (1.7 s seen with both cores hogged).
        expect(answer.ms).toBeLessThan(10_000);
      } finally {
        session.destroy();
      }
    },
  );

  // In gRPC and gRPC-Web that is grpc-status 8.
  it.each(Object.entries(protocols))(
    "an authenticated but over-limit request is refused with resource_exhausted naming the limit (%s)",
    async (_name, contentType) => {
      const session = await connect();
      try {
        const answer = await call(session, listNodes, contentType, { bytes: 2 * MiB }, { "x-modelforge-admin-token": adminKey });
        expect(answer.code).toBe("resource_exhausted");
        expect(answer.message).toMatch(/\d+ bytes/);
        expect(answer.message).toContain("ListNodes");
      } finally {
        session.destroy();
      }
    },
  );

  it("GetServerInfo stays fast and the server stays small while attackers stream 300 MB bodies", async () => {
    const probe = await connect();
    let attacker: ChildProcess | undefined;
    try {
      const attack = () => {
        const child = spawn(
          process.execPath,
          ["--import", "tsx", "test/support/attack.ts", url, join(dir, "certs", "ca.crt"), listNodes, String(attackBytes), "4"],
          { cwd: repoRoot, stdio: ["ignore", "pipe", "inherit"] },
        );
        let report = "";
        child.stdout!.on("data", (c: Buffer) => {
          report += c.toString();
        });
        const exited = new Promise((resolve) => child.on("exit", resolve));
        const started = new Promise<void>((resolve) => child.stdout!.on("data", () => report.includes("attacking") && resolve()));
        return { child, started, exited, report: () => report };
      };
      await serverInfoLatencies(probe, 20); // warm-up
      // A first, short attack lets V8 grow its young generation to the allocation rate (tens of
      // MiB, returned to no one but reused): what is measured after it is what an attack keeps.
      const warm = attack();
      attacker = warm.child;
      await warm.started;
      await serverInfoLatencies(probe, 50);
      warm.child.kill("SIGTERM");
      await warm.exited;
      const before = await serverInfoLatencies(probe, 100);
      const rssBefore = serverRss();
      const peak = watchRss();
      const real = attack();
      attacker = real.child;
      await real.started;
      const during = await serverInfoLatencies(probe, 200);
      real.child.kill("SIGTERM");
      await real.exited;
      const report = real.report();
      const grown = peak() - rssBefore;
      const after = await serverInfoLatencies(probe, 100);
      const answers = JSON.parse(report.split("\n")[1]!) as Record<string, number>;
      // The machine is shared and busy: the bound is 250 ms, or three times what the same calls
      // took just before and after the attack if that is more. (The attacker's own processes
      // compete for the same cores: with two CPU hogs running, 108 ms was seen against 36 ms
      // around it.) Unbounded, the attack made them take seconds and then killed the server.
      const bound = Math.max(250, 3 * Math.max(p99(before), p99(after)));
      expect(p99(during)).toBeLessThan(bound);
      expect(Object.keys(answers).sort()).toEqual(["unauthenticated"]);
      // At least four refusals while the probe ran: as each first reads up to the drain's 16 MiB
      // (server/edge/drain.ts), that is 64 MiB and more of attack bodies taken in during the
      // measurement (exactly 4 seen with both cores busy).
      expect(answers.unauthenticated).toBeGreaterThanOrEqual(4);
      // The attack sends 1.2 GB; read into memory it would grow the server by hundreds of MiB. The
      // peak seen while refusing it was 40-73 MiB (socket buffers and heap churn, given back),
      // more on PostgreSQL, whose heap starts small: the bound leaves room for that, not for bodies.
      expect(grown).toBeLessThan(96 * MiB);
    } finally {
      if (attacker?.exitCode === null) attacker.kill("SIGKILL");
      probe.destroy();
    }
  });

  it("bodies of unknown fields just under a method's limit get a typed answer and leave the server bounded", async () => {
    // 0x41 is field 8, fixed64 (nine bytes a field): 7,000 unknown fields per request. That the
    // server keeps none of them is shown in test/unit/edge-rules.test.ts, where it can be seen.
    const sessions = await Promise.all(Array.from({ length: 4 }, () => connect()));
    const round = async () => {
      const answers = await Promise.all(
        sessions.flatMap((s) => Array.from({ length: 25 }, () => call(s, enroll, "application/proto", { bytes: 9 * 7_000 }))),
      );
      // resource_exhausted: the enrollment limiter's five in flight from one address are taken.
      for (const a of answers) expect(["invalid_argument", "unauthenticated", "resource_exhausted"]).toContain(a.code);
    };
    try {
      // Warm-up: a fresh server's heap and allocator grow over its first few megabytes of bodies
      // whatever they carry (up to ~40 MiB on a server without the embedded database's heap).
      for (let i = 0; i < 2; i++) await round();
      const before = serverRss();
      const peak = watchRss();
      for (let i = 0; i < 3; i++) await round();
      expect(peak() - before).toBeLessThan(64 * MiB);
    } finally {
      for (const s of sessions) s.destroy();
    }
  });

  it("the server is still healthy afterwards", async () => {
    const session = await connect();
    try {
      expect((await call(session, getServerInfo, "application/json", emptyJson)).code).toBe("ok");
      expect(server.child.exitCode).toBeNull();
    } finally {
      session.destroy();
    }
  });
});
