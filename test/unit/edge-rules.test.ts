// The edge's pure rules: the per-method request limits and what is decided from headers and TLS
// alone. test/integration/edge-limits.test.ts tries them through the real server.
import { describe, expect, it } from "vitest";
import { Code, type ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { WireType } from "@bufbuild/protobuf/wire";
import { admit, type EdgeRequest } from "../../server/edge/admission.js";
import { defaultRequestBytes, largestRequestBytes, requestLimitOf } from "../../server/edge/limits.js";
import { edgeAdapterOptions } from "../../server/edge/guard.js";
import { MAX_INVOKE_PAYLOAD_BYTES } from "../../server/jobs/spec.js";
import { putArtifactFilesRequestBytes } from "../../server/artifacts/rules.js";
import { AgentService, GetServerInfoRequestSchema, type GetServerInfoRequest } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { PresentedCertificate } from "../../server/context.js";
import { DeploymentService } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { Health } from "../../gen/proto/grpc/health/v1/health_pb.js";

const KiB = 1024;
const agent = (name: string) => `/modelforge.agent.v1.AgentService/${name}`;
const admin = (name: string) => `/modelforge.admin.v1.AdminService/${name}`;
const invokePaths = [
  "/modelforge.deployment.v1.DeploymentService/Invoke",
  "/modelforge.deployment.v1.DeploymentService/InvokeStream",
  admin("CreateJob"),
  agent("CompleteJob"),
  agent("Session"),
];
const allPaths = [AgentService, AdminService, DeploymentService, Health].flatMap((s) => s.methods.map((m) => `/${s.typeName}/${m.name}`));

describe("request limits", () => {
  it.each([
    [agent("GetServerInfo"), "application/proto", 1 * KiB],
    [agent("GetServerInfo"), "application/json", 1.5 * KiB],
    [agent("Enroll"), "application/grpc", 72 * KiB],
    [agent("Heartbeat"), "application/grpc-web+proto", 8 * KiB],
    [agent("PutInventory"), "application/proto", 256 * KiB],
    [agent("ReportJobProgress"), "application/grpc", 4 * KiB],
    [admin("ListNodes"), "application/grpc", 64 * KiB],
    [admin("GetNode"), "application/grpc", defaultRequestBytes],
    [admin("GetNode"), "application/grpc-web-text", 1.5 * defaultRequestBytes],
    ["/no.such.Service/Method", "application/json", 1.5 * defaultRequestBytes],
  ])("%s as %s: %d bytes", (path, contentType, bytes) => {
    expect(requestLimitOf(path, contentType).bytes).toBe(bytes);
  });

  it("gives the 4 MiB of a deployment.invoke.v1 payload, in either encoding, only to the paths that carry one; an artifact chunk 1 MiB, a batch of small files 1 MiB and their names", () => {
    for (const path of allPaths) {
      const binary = requestLimitOf(path, "application/proto").bytes;
      const json = requestLimitOf(path, "application/json").bytes;
      if (invokePaths.includes(path)) {
        expect(binary, path).toBeGreaterThan(MAX_INVOKE_PAYLOAD_BYTES);
        // base64 of the payload, with room for the other fields.
        expect(json, path).toBeGreaterThan(Math.ceil(MAX_INVOKE_PAYLOAD_BYTES / 3) * 4);
      } else if (path === "/modelforge.admin.v1.AdminService/UploadArtifactChunk") {
        // An operator pushing an artifact: one chunk of at most 1 MiB and the names around it.
        expect(binary, path).toBe(1024 * KiB + 16 * KiB);
      } else if (path === "/modelforge.admin.v1.AdminService/PutArtifactFiles") {
        // Small files sent whole: 1 MiB of data and the names of up to 1000 files.
        expect(binary, path).toBe(putArtifactFilesRequestBytes);
      } else {
        expect(binary, path).toBeLessThanOrEqual(256 * KiB);
      }
      expect(json, path).toBeLessThanOrEqual(largestRequestBytes);
    }
  });

  it("bounds the Session per message, every other method per body", () => {
    expect(allPaths.filter((p) => requestLimitOf(p, "application/grpc").perMessage)).toEqual([agent("Session")]);
  });
});

describe("admission from headers and TLS", () => {
  const key = "k".repeat(16);
  const keys = { admin: key, readOnly: undefined };
  const certificate = {
    subjectaltname: "URI:urn:modelforge:node:5b0c2a3e-9a37-4d5e-8f7a-0c1e2d3f4a5b",
    serialNumber: "01",
    valid_to: "Jan 1 00:00:00 2100 GMT",
  } satisfies PresentedCertificate;
  const noPeer = () => ({ certificate: undefined, certificateError: undefined });
  const request = (over: Partial<EdgeRequest>): EdgeRequest => ({
    path: agent("GetServerInfo"),
    contentType: "application/proto",
    contentLength: undefined,
    adminToken: undefined,
    peer: noPeer,
    ...over,
  });
  const refusal = (req: EdgeRequest): ConnectError | undefined => {
    const a = admit(req, keys);
    return a.admitted ? undefined : a.refusal;
  };

  it.each<[string, Partial<EdgeRequest>, Code | undefined, RegExp | undefined]>([
    ["anonymous GetServerInfo", {}, undefined, undefined],
    ["anonymous Enroll", { path: agent("Enroll") }, undefined, undefined],
    ["admin call without a token", { path: admin("ListNodes") }, Code.Unauthenticated, /x-modelforge-admin-token/],
    [
      "admin call with a wrong token",
      { path: admin("ListNodes"), adminToken: "x".repeat(16) },
      Code.Unauthenticated,
      /invalid admin token/,
    ],
    ["admin call with the key", { path: admin("ListNodes"), adminToken: key }, undefined, undefined],
    ["node call without a certificate", { path: agent("Heartbeat") }, Code.Unauthenticated, /^client certificate required$/],
    [
      "node call with a refused certificate",
      { path: agent("Session"), peer: () => ({ certificate: undefined, certificateError: "certificate has expired" }) },
      Code.Unauthenticated,
      /not accepted: certificate has expired/,
    ],
    [
      "node call with a node's certificate",
      { path: agent("Heartbeat"), peer: () => ({ certificate, certificateError: undefined }) },
      undefined,
      undefined,
    ],
    [
      "declared body over the limit",
      { contentLength: 1 * KiB + 1 },
      Code.ResourceExhausted,
      /of 1025 bytes is over the limit of 1024 bytes for \/modelforge\.agent\.v1\.AgentService\/GetServerInfo/,
    ],
    ["declared body at the limit", { contentLength: 1 * KiB }, undefined, undefined],
    [
      "declared over-limit body, before the token is looked at",
      { path: admin("ListNodes"), contentLength: 300e6 },
      Code.ResourceExhausted,
      /limit of 65536 bytes/,
    ],
    [
      "a Session's declared length (its total)",
      { path: agent("Session"), contentLength: 300e6, peer: () => ({ certificate, certificateError: undefined }) },
      undefined,
      undefined,
    ],
    ["an unknown path (the adapter answers it without reading)", { path: "/no.such.Service/Method" }, undefined, undefined],
  ])("%s", (_name, over, code, message) => {
    const r = refusal(request(over));
    expect(r?.code).toBe(code);
    if (message !== undefined) expect(r?.rawMessage).toMatch(message);
  });

  it("fails closed when no admin key is configured", () => {
    const a = admit(request({ path: admin("ListNodes"), adminToken: key }), { admin: undefined, readOnly: undefined });
    expect(a.admitted ? undefined : a.refusal.code).toBe(Code.Unauthenticated);
  });

  it("reads the TLS certificate only for calls that need one", () => {
    const peer = () => {
      throw new Error("certificate read");
    };
    expect(admit(request({ path: admin("ListNodes"), adminToken: key, peer }), keys).admitted).toBe(true);
    expect(admit(request({ path: agent("Enroll"), peer }), keys).admitted).toBe(true);
  });
});

describe("the Connect adapters' options", () => {
  it("skip unknown fields instead of keeping them on the request", async () => {
    let seen: GetServerInfoRequest | undefined;
    const transport = createRouterTransport(
      (router) =>
        router.rpc(AgentService.method.getServerInfo, (req) => {
          seen = req;
          return {};
        }),
      {
        router: edgeAdapterOptions,
      },
    );
    // What a body of 0x41 bytes is: field 8, fixed64, over and over.
    const $unknown = Array.from({ length: 1000 }, () => ({ no: 8, wireType: WireType.Bit64, data: new Uint8Array(8).fill(0x41) }));
    const request = create(GetServerInfoRequestSchema);
    request.$unknown = $unknown;
    await createClient(AgentService, transport).getServerInfo(request);
    expect(seen).toBeDefined();
    expect(seen!.$unknown ?? []).toHaveLength(0);
  });
});
