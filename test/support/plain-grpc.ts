// A plain gRPC client of DeploymentService, as a service team would generate one: @grpc/grpc-js
// with the stubs built at run time from proto/, nothing of this project's code on the call path.
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

const protoRoot = fileURLToPath(new URL("../../proto", import.meta.url));

// biome-ignore lint/suspicious/noExplicitAny: grpc-js builds its stubs at run time, untyped.
export function plainDeploymentService(url: string, caPem: string): any {
  const defs = protoLoader.loadSync(["modelforge/deployment/v1/deployment.proto"], {
    includeDirs: [protoRoot],
    longs: String,
    enums: String,
    defaults: true,
  });
  // biome-ignore lint/suspicious/noExplicitAny: as above.
  const loaded = grpc.loadPackageDefinition(defs) as any;
  return new loaded.modelforge.deployment.v1.DeploymentService(url.replace("https://", ""), grpc.credentials.createSsl(Buffer.from(caPem)));
}
