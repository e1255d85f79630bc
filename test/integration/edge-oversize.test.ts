// Issue #34: an oversized or refused request ends its own HTTP/2 stream only, with its typed
// answer, on every service and in every framing; a normal call on the same connection then
// succeeds. Bodies are written whole, as client libraries write them: a node:http2 client then
// holds the unsent rest against its session memory (see server/edge/drain.ts for why that poisoned
// the connection). Each case runs on one connection of its own, over the real TLS port.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type http2 from "node:http2";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { connect } from "../support/raw-call.js";
import { oversizedThenNormal, type Request } from "../support/oversize.js";
import { enrollTestNode } from "../support/node.js";

const MiB = 1024 * 1024;
const agent = "/modelforge.agent.v1.AgentService";
const admin = "/modelforge.admin.v1.AdminService";
const deployment = "/modelforge.deployment.v1.DeploymentService";

const framings = {
  "Connect unary": "application/proto",
  gRPC: "application/grpc",
  "gRPC-Web": "application/grpc-web+proto",
} as const;

let ts: TestServer;
let serviceKey: Record<string, string>;
const adminToken = { "x-modelforge-admin-token": testAdminKey };

beforeAll(async () => {
  ts = await startTestServer();
  const { secret } = await ts.admin.createServiceKey({ name: "oversize", deployments: ["absent"] });
  serviceKey = { authorization: `Bearer ${secret}` };
}, 60_000);

afterAll(async () => {
  await ts?.stop();
});

async function onOneConnection<T>(
  run: (session: http2.ClientHttp2Session) => Promise<T>,
  identity?: { cert: string; key: string },
): Promise<T> {
  const session = await connect(ts.url, ts.caPem, identity);
  try {
    return await run(session);
  } finally {
    session.destroy();
  }
}

interface Case {
  oversized: Request;
  /** The typed answer the oversized request gets. */
  code: string;
  normal: Request;
}

const cases = (contentType: string): Record<string, Case> => ({
  "AgentService Enroll, unauthenticated": {
    oversized: { path: `${agent}/Enroll`, contentType },
    code: "resource_exhausted",
    normal: { path: `${agent}/GetServerInfo`, contentType },
  },
  "AdminService ListNodes with the admin token": {
    oversized: { path: `${admin}/ListNodes`, contentType, headers: adminToken },
    code: "resource_exhausted",
    normal: { path: `${admin}/ListNodes`, contentType, headers: adminToken },
  },
  "AdminService ListNodes without a token (refused from its headers)": {
    oversized: { path: `${admin}/ListNodes`, contentType },
    code: "unauthenticated",
    normal: { path: `${agent}/GetServerInfo`, contentType },
  },
  "DeploymentService Invoke with a service key": {
    oversized: { path: `${deployment}/Invoke`, contentType, headers: serviceKey },
    code: "resource_exhausted",
    normal: { path: `${deployment}/ListDeployments`, contentType, headers: serviceKey },
  },
});

describe.each(Object.entries(framings))("an oversized request ends only its own stream (%s)", (_name, contentType) => {
  // The cases' names; their requests need the service key, made once the server is up.
  it.each(Object.keys(cases(contentType)))("%s: 12 MiB, then a normal call", async (name) => {
    const c = cases(contentType)[name]!;
    const answers = await onOneConnection((s) => oversizedThenNormal(s, c.oversized, 12 * MiB, c.normal));
    expect(answers.oversized.map((a) => a.code)).toEqual([c.code]);
    expect(answers.normal.code).toBe("ok");
  });

  it("two refused bodies of 6 MiB in a row, then a normal call", async () => {
    // Each alone fits the client's 10 MB; together, left unsent, they did not.
    const c = cases(contentType)["AgentService Enroll, unauthenticated"]!;
    const answers = await onOneConnection((s) => oversizedThenNormal(s, c.oversized, 6 * MiB, c.normal, 2));
    expect(answers.oversized.map((a) => a.code)).toEqual(["resource_exhausted", "resource_exhausted"]);
    expect(answers.normal.code).toBe("ok");
  });
});

describe("off the RPC services", () => {
  it("a 12 MiB POST to the console's files gets 405, then a normal call succeeds", async () => {
    const answers = await onOneConnection((s) =>
      oversizedThenNormal(s, { path: "/ui/", contentType: "application/octet-stream" }, 12 * MiB, {
        path: `${agent}/GetServerInfo`,
        contentType: "application/proto",
      }),
    );
    expect(answers.oversized.map((a) => a.code)).toEqual(["http 405"]);
    expect(answers.normal.code).toBe("ok");
  });

  // The agents' Session, on the gRPC stream API: refused at its open, or at its first message.
  const session = { path: `${agent}/Session`, contentType: "application/grpc" };
  const serverInfo = { path: `${agent}/GetServerInfo`, contentType: "application/grpc" };

  it("a 12 MiB first Session message without a certificate gets unauthenticated, then a normal call succeeds", async () => {
    const answers = await onOneConnection((s) => oversizedThenNormal(s, session, 12 * MiB, serverInfo));
    expect(answers.oversized.map((a) => a.code)).toEqual(["unauthenticated"]);
    expect(answers.normal.code).toBe("ok");
  });

  it.each(["application/grpc", "application/grpc-web+proto"])(
    "a node's 12 MiB Session message gets resource_exhausted, then a normal call succeeds (%s)",
    async (contentType) => {
      const state = await (await enrollTestNode(ts, `oversize-${contentType.length}`)).state();
      const answers = await onOneConnection((s) => oversizedThenNormal(s, { ...session, contentType }, 12 * MiB, serverInfo), {
        cert: state.certPem,
        key: state.keyPem,
      });
      expect(answers.oversized.map((a) => a.code)).toEqual(["resource_exhausted"]);
      expect(answers.normal.code).toBe("ok");
    },
  );
});
