// How many bytes a request may carry, per method. Small by default: most requests are a few ids and
// filters. Only the paths that carry a deployment.invoke.v1 payload get the 4 MiB the contract
// allows (plus room for the fields and framing around it). Pure: server/edge/guard.ts applies it.
import type { DescService } from "@bufbuild/protobuf";
import { AgentService } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentService } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { Health } from "../../gen/proto/grpc/health/v1/health_pb.js";
import { MAX_INVOKE_PAYLOAD_BYTES } from "../jobs/spec.js";
import { putArtifactFilesRequestBytes } from "../artifacts/rules.js";
import { ServerReflection } from "../../gen/proto/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ServerReflectionAlpha } from "../../gen/proto/grpc/reflection/v1alpha/reflection_pb.js";

const KiB = 1024;

/** The most bytes of one binary reflection question: a host and one name of at most 256 bytes each. */
export const reflectionQuestionBytes = 1024;
/** Both versions of the reflection service (server/reflection/reflection.ts serves them). */
const reflectionServices = [ServerReflection, ServerReflectionAlpha];

/** A method not listed below: ids, names, filters, page tokens. */
export const defaultRequestBytes = 16 * KiB;

/** A deployment.invoke.v1 payload and the message around it. */
export const invokeRequestBytes = MAX_INVOKE_PAYLOAD_BYTES + 64 * KiB;

const path = (service: DescService, localName: string): string => {
  const method = service.method[localName];
  if (method === undefined) throw new Error(`${service.typeName} has no method ${localName}`);
  return `/${service.typeName}/${method.name}`;
};

/** Binary-encoded bytes of one request message, where the default does not fit. */
const requestBytes: ReadonlyMap<string, number> = new Map([
  // Empty requests, or a service name.
  [path(AgentService, "getServerInfo"), 1 * KiB],
  [path(AgentService, "claimJob"), 1 * KiB],
  [path(Health, "check"), 1 * KiB],
  [path(Health, "watch"), 1 * KiB],
  // A CSR (server/pki/csr.ts takes PEM up to 64 KiB), a token and names.
  [path(AgentService, "enroll"), 72 * KiB],
  [path(AgentService, "renewCredential"), 72 * KiB],
  // Agent version, the closed set of capability names.
  [path(AgentService, "heartbeat"), 8 * KiB],
  // Host facts with every disk or mount, and every GPU: large hosts list hundreds of mounts.
  [path(AgentService, "putInventory"), 256 * KiB],
  [path(AgentService, "putTelemetry"), 256 * KiB],
  // A job id and a short, bounded status or failure message.
  [path(AgentService, "reportJobProgress"), 4 * KiB],
  [path(AgentService, "failJob"), 4 * KiB],
  // Label maps.
  [path(AdminService, "createEnrollmentToken"), 64 * KiB],
  [path(AdminService, "updateNode"), 64 * KiB],
  [path(AdminService, "listNodes"), 64 * KiB],
  [path(AdminService, "watchNodes"), 64 * KiB],
  [path(AdminService, "registerNode"), 64 * KiB],
  // One chunk of an artifact pushed into the store (at most 1 MiB) and the names around it.
  [path(AdminService, "uploadArtifactChunk"), 1024 * KiB + 16 * KiB],
  // Small files sent whole (at most 1 MiB of data in all) and the names of up to 1000 files.
  [path(AdminService, "putArtifactFiles"), putArtifactFilesRequestBytes],
  // Paths of a deployment.invoke.v1 payload: the request itself, the job that relays it, its
  // result, and the Session that carries results and everything else an agent reports.
  [path(DeploymentService, "invoke"), invokeRequestBytes],
  [path(DeploymentService, "invokeStream"), invokeRequestBytes],
  [path(AdminService, "createJob"), invokeRequestBytes],
  [path(AgentService, "completeJob"), invokeRequestBytes],
  [path(AgentService, "session"), invokeRequestBytes],
  // Reflection: each question is a host and one name (server/reflection/reflection.ts applies it per message).
  ...reflectionServices.map((s) => [path(s, "serverReflectionInfo"), reflectionQuestionBytes] as const),
]);

const clientStreaming: ReadonlySet<string> = new Set(
  [AgentService, AdminService, DeploymentService, Health, ...reflectionServices].flatMap((service) =>
    service.methods
      .filter((m) => m.methodKind === "client_streaming" || m.methodKind === "bidi_streaming")
      .map((m) => `/${service.typeName}/${m.name}`),
  ),
);

export interface RequestLimit {
  /** Most bytes allowed: of the whole body, or of each message when `perMessage`. */
  bytes: number;
  /**
   * A client stream (Session) lives for hours, so only its messages are bounded, not its total;
   * each message's length is declared in its envelope and checked before it is read.
   */
  perMessage: boolean;
}

/**
 * JSON spells bytes fields in base64 (4/3) and names every field, as does gRPC-Web's text form
 * (base64 of the binary); half again covers both.
 */
function isTextEncoded(contentType: string): boolean {
  return /json|grpc-web-text/i.test(contentType);
}

/** The limit of a request to `path` (query string excluded) sent as `contentType`. */
export function requestLimitOf(path: string, contentType: string): RequestLimit {
  const binary = requestBytes.get(path) ?? defaultRequestBytes;
  return {
    bytes: isTextEncoded(contentType) ? Math.ceil(binary * 1.5) : binary,
    perMessage: clientStreaming.has(path),
  };
}

/** The largest limit of any method in any encoding: the Connect adapter's own backstop. */
export const largestRequestBytes = Math.ceil(Math.max(...requestBytes.values(), defaultRequestBytes) * 1.5);
