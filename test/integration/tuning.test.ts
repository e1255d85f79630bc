// TLS session resumption, held against real servers: an agent's reconnect resumes (no signature on
// either side), on the same server, on another replica sharing the CA and after a restart; a
// server with another CA does not resume it; and a resumed connection authorizes nothing a full
// one would not (a revoked credential is refused all the same).
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import tls from "node:tls";
import { generateKeyPairSync } from "node:crypto";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { serverNodeFlags } from "../../server/tuning.js";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { grpcTransport } from "../../common/http2-sessions.js";
import { AgentService } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { resumingTls } from "../../agent/session/transport.js";
import { sessionTicketKeys, ticketEpochMs } from "../../server/identity/pki/session-tickets.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode, type TestNode } from "../support/node.js";
import { freePort } from "../support/ports.js";
import { waitFor } from "../support/wait.js";

let a: TestServer;
let b: TestServer;
let node: TestNode;

beforeAll(async () => {
  a = await startTestServer();
  // Another control plane with the same certificates directory: a replica, or A after a restart.
  b = await startTestServer({ MODELFORGE_CERTS_DIR: a.config.certsDir });
  node = await enrollTestNode(a, "resuming");
});
afterAll(async () => {
  await b?.stop();
  await a?.stop();
});

/**
 * One unary node call (Heartbeat, which needs the node's certificate) over a new connection to
 * `server`, offering what the node's last connection was given; says whether TLS resumed.
 */
async function heartbeatOnce(server: TestServer, caPem = server.caPem): Promise<{ resumed: boolean; refused?: Code }> {
  const state = await node.state();
  const connect = resumingTls({ ca: caPem, cert: state.certPem, key: state.keyPem }, state.certPem);
  let resumed: boolean | undefined;
  let ticketed = false;
  const client = createClient(
    AgentService,
    grpcTransport({
      baseUrl: server.url,
      nodeOptions: {
        createConnection: (authority: URL) => {
          const socket = connect(authority);
          socket.once("secureConnect", () => (resumed = socket.isSessionReused()));
          socket.once("session", () => (ticketed = true));
          return socket;
        },
      },
    }),
  );
  const refused = await client.heartbeat({}).then(
    () => undefined,
    (err: unknown) => ConnectError.from(err).code,
  );
  // TLS 1.3 sends its tickets after the handshake, and only after a full one: the next connection
  // can offer a ticket once it came (a resumed connection keeps offering the one it resumed).
  await waitFor(() => ticketed || resumed, { what: "a TLS session ticket" });
  return { resumed: resumed!, ...(refused !== undefined ? { refused } : {}) };
}

describe("TLS session resumption", () => {
  it("resumes an agent's reconnect, on the same server and on another sharing the CA", async () => {
    expect(await heartbeatOnce(a)).toEqual({ resumed: false }); // the first connection: a full handshake
    expect(await heartbeatOnce(a)).toEqual({ resumed: true });
    // B shares A's CA but not its database here: TLS resumes, and B then looks the credential up.
    expect(await heartbeatOnce(b)).toEqual({ resumed: true, refused: Code.Unauthenticated });
  });

  it("an attempt refused before TCP connects never decodes the saved session; the next still resumes", async () => {
    expect(await heartbeatOnce(a)).toEqual({ resumed: true });
    const decode = vi.spyOn(tls.TLSSocket.prototype as unknown as { setSession: (s: Buffer) => void }, "setSession");
    try {
      const state = await node.state();
      const socket = resumingTls(
        { ca: a.caPem, cert: state.certPem, key: state.keyPem },
        state.certPem,
      )(new URL(`https://127.0.0.1:${await freePort()}`));
      const refused = await new Promise<string>((resolve) => socket.once("error", (err: NodeJS.ErrnoException) => resolve(err.code ?? "")));
      socket.destroy();
      expect(refused).toBe("ECONNREFUSED");
      expect(decode).not.toHaveBeenCalled();
      expect(await heartbeatOnce(a)).toEqual({ resumed: true });
      expect(decode).toHaveBeenCalledTimes(1);
    } finally {
      decode.mockRestore();
    }
  });

  it("a server with another CA does not resume it", async () => {
    const other = await startTestServer();
    try {
      await heartbeatOnce(a);
      // The node's certificate is not from this CA: refused, and on a full handshake.
      expect(await heartbeatOnce(other, `${a.caPem}${other.caPem}`)).toEqual({ resumed: false, refused: Code.Unauthenticated });
    } finally {
      await other.stop();
    }
  });

  it("a resumed connection is refused once the credential is revoked", async () => {
    await heartbeatOnce(a);
    await a.admin.revokeNodeCredential({ nodeId: node.nodeId, reason: "resumption test" });
    expect(await heartbeatOnce(a)).toEqual({ resumed: true, refused: Code.Unauthenticated });
  });

  it("derives the same ticket keys for one CA and epoch, others for the next epoch or another CA", () => {
    const ca = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey;
    const other = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey;
    const t = 1_800_000_000_000;
    const epochStart = Math.floor(t / ticketEpochMs) * ticketEpochMs;
    expect(sessionTicketKeys(ca, t)).toHaveLength(48);
    expect(sessionTicketKeys(ca, epochStart).equals(sessionTicketKeys(ca, epochStart + ticketEpochMs - 1))).toBe(true);
    expect(sessionTicketKeys(ca, epochStart).equals(sessionTicketKeys(ca, epochStart + ticketEpochMs))).toBe(false);
    expect(sessionTicketKeys(ca, t).equals(sessionTicketKeys(other, t))).toBe(false);
  });
});

describe("the control plane's Node flags", () => {
  const root = fileURLToPath(new URL("../..", import.meta.url));
  it("are what npm start and the systemd unit run it with, and Node takes them", () => {
    const start = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts: Record<string, string> }).scripts.start!;
    const unit = readFileSync(join(root, "deploy/modelforge-server.service"), "utf8");
    const execStart = /^ExecStart=(.*)$/m.exec(unit)?.[1] ?? "";
    expect(start).toContain(`node ${serverNodeFlags.join(" ")} dist/server/main.mjs`);
    for (const flag of serverNodeFlags) expect(execStart.split(" ")).toContain(flag);
    const run = spawnSync(process.execPath, [...serverNodeFlags, "-e", "0"], { encoding: "utf8" });
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
  });
});
