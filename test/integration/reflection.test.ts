// gRPC server reflection through a real server: `buf curl --reflect` (a devDependency) lists every
// service and calls a method without proto files, with no client certificate and no admin key;
// each question is bounded like every other request.
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { grpcTransport } from "../../common/http2-sessions.js";
import { create, fromBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import {
  ServerReflection,
  ServerReflectionRequestSchema,
  type ServerReflectionResponse,
} from "../../gen/proto/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ServerReflectionAlpha } from "../../gen/proto/grpc/reflection/v1alpha/reflection_pb.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { repoRoot } from "../support/process.js";
import { requestLimitOf } from "../../server/edge/limits.js";

const run = promisify(execFile);
const allServices = [
  "grpc.health.v1.Health",
  "grpc.reflection.v1.ServerReflection",
  "grpc.reflection.v1alpha.ServerReflection",
  "modelforge.admin.v1.AdminService",
  "modelforge.agent.v1.AgentService",
  "modelforge.deployment.v1.DeploymentService",
];

let server: TestServer;
let dir: string;
let caFile: string;
beforeAll(async () => {
  server = await startTestServer();
  dir = mkdtempSync(join(tmpdir(), "mf-reflect-"));
  caFile = join(dir, "ca.crt");
  writeFileSync(caFile, server.caPem);
});
afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const bufCurl = async (...args: string[]) =>
  (await run("npx", ["buf", "curl", "--cacert", caFile, ...args], { cwd: repoRoot, timeout: 60_000 })).stdout;

describe("server reflection", () => {
  it.each(["grpc-v1", "grpc-v1alpha"])(
    "buf curl --reflect (%s) lists every service without proto files or credentials",
    async (protocol) => {
      const out = await bufCurl("--protocol", "grpc", "--reflect-protocol", protocol, "--list-services", server.url);
      expect(out.trim().split("\n").sort()).toEqual(allServices);
    },
  );

  it("describes methods well enough to call one: buf curl GetServerInfo", async () => {
    const methods = await bufCurl("--protocol", "grpc", "--list-methods", server.url);
    expect(methods).toContain("modelforge.agent.v1.AgentService/Session");
    const out = await bufCurl("--protocol", "grpc", "--data", "{}", `${server.url}/modelforge.agent.v1.AgentService/GetServerInfo`);
    expect(JSON.parse(out)).toMatchObject({ caCertificatePem: server.caPem });
  });

  it("answers a file with its dependencies once per stream, and not-found for unknown symbols", async () => {
    const client = createClient(ServerReflection, grpcTransport({ baseUrl: server.url, nodeOptions: { ca: server.caPem } }));
    async function* questions() {
      yield create(ServerReflectionRequestSchema, {
        messageRequest: { case: "fileContainingSymbol", value: "modelforge.agent.v1.AgentService.Enroll" },
      });
      yield create(ServerReflectionRequestSchema, { messageRequest: { case: "fileByFilename", value: "modelforge/admin/v1/admin.proto" } });
      yield create(ServerReflectionRequestSchema, { messageRequest: { case: "fileContainingSymbol", value: "nope.Nothing" } });
      // The contract's extensions of FieldOptions: the capability option on job spec fields, and
      // protovalidate's rules (buf.validate.field) on bounded fields.
      yield create(ServerReflectionRequestSchema, {
        messageRequest: { case: "allExtensionNumbersOfType", value: "google.protobuf.FieldOptions" },
      });
      yield create(ServerReflectionRequestSchema, {
        messageRequest: {
          case: "fileContainingExtension",
          value: { containingType: "google.protobuf.FieldOptions", extensionNumber: 50001 },
        },
      });
    }
    const answers: ServerReflectionResponse[] = [];
    for await (const a of client.serverReflectionInfo(questions())) answers.push(a);
    const names = (i: number) => {
      const r = answers[i]!.messageResponse;
      if (r.case !== "fileDescriptorResponse") throw new Error(`answer ${i} is ${r.case}`);
      return r.value.fileDescriptorProto.map((b) => fromBinary(FileDescriptorProtoSchema, b).name);
    };
    expect(names(0)[0]).toBe("modelforge/agent/v1/agent.proto");
    expect(names(0)).toContain("modelforge/common/v1/common.proto");
    expect(names(1)[0]).toBe("modelforge/admin/v1/admin.proto");
    expect(names(1)).not.toContain("modelforge/common/v1/common.proto"); // sent on this stream already
    expect(answers[2]!.messageResponse).toMatchObject({ case: "errorResponse", value: { errorCode: Code.NotFound } });
    expect(answers[3]!.messageResponse).toMatchObject({ case: "allExtensionNumbersResponse", value: { extensionNumber: [1159, 50001] } });
    expect(names(4)[0]).toBe("modelforge/jobs/v1/jobs.proto");
  });

  it("bounds each question: an over-long name is invalid_argument, an oversized message resource_exhausted", async () => {
    const client = createClient(ServerReflectionAlpha, grpcTransport({ baseUrl: server.url, nodeOptions: { ca: server.caPem } }));
    const ask = async (value: string) => {
      async function* one() {
        yield { messageRequest: { case: "fileContainingSymbol" as const, value } };
      }
      for await (const _ of client.serverReflectionInfo(one()));
    };
    await expect(ask("x".repeat(300))).rejects.toMatchObject({ code: Code.InvalidArgument });
    await expect(ask("x".repeat(2000))).rejects.toSatisfy((e: unknown) => ConnectError.from(e).code === Code.ResourceExhausted);
    // The limit is the edge's table entry for the method, as for every other method.
    expect(requestLimitOf("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "application/grpc")).toEqual({
      bytes: 1024,
      perMessage: true,
    });
  });
});
