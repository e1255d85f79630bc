// gRPC server reflection (grpc.reflection.v1, and v1alpha which older grpcurl and buf curl still
// ask first), so tools discover the API without proto files. Answered from the descriptors
// compiled into the server (protobuf-es embeds each file's FileDescriptorProto): only the public
// contract, so it needs no credential. No npm package serves reflection for Connect (@grpc/reflection
// and the others plug into grpc-js servers or load .proto files at run time), and the protocol is
// four lookups over a registry protobuf-es already has.
import { Code, type ConnectRouter, type ServiceImpl } from "@connectrpc/connect";
import { create, toBinary, type DescFile, type DescMessage, type DescService, type Message } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { nestedTypes } from "@bufbuild/protobuf/reflect";
import * as v1 from "../../gen/proto/grpc/reflection/v1/reflection_pb.js";
import * as v1alpha from "../../gen/proto/grpc/reflection/v1alpha/reflection_pb.js";
import { requestViolation } from "../edge/validate.js";
import { reflectionQuestionBytes } from "../edge/limits.js";

/** The question, as both versions spell it. */
type Question = v1.ServerReflectionRequest["messageRequest"] | v1alpha.ServerReflectionRequest["messageRequest"];

/** The answer, as both versions accept it. */
type Answer =
  | { case: "fileDescriptorResponse"; value: { fileDescriptorProto: Uint8Array[] } }
  | { case: "listServicesResponse"; value: { service: { name: string }[] } }
  | { case: "allExtensionNumbersResponse"; value: { baseTypeName: string; extensionNumber: number[] } }
  | { case: "errorResponse"; value: { errorCode: number; errorMessage: string } };

/** The standard reflection services themselves: listed and described like every other service. */
export const reflectionServices: readonly DescService[] = [v1.ServerReflection, v1alpha.ServerReflection];

/** Every file the services need, with its serialized descriptor, and every symbol's file. */
export class ReflectionIndex {
  private readonly files = new Map<string, { desc: DescFile; bytes: Uint8Array }>();
  private readonly symbols = new Map<string, string>();
  /** Message type name to its extensions' numbers, and "type:number" to the extension's file. */
  private readonly extensionNumbers = new Map<string, number[]>();
  private readonly extensions = new Map<string, string>();
  readonly serviceNames: readonly string[];

  constructor(services: readonly DescService[]) {
    this.serviceNames = services.map((s) => s.typeName);
    for (const s of services) this.add(s.file);
  }

  private add(file: DescFile): void {
    if (this.files.has(file.proto.name)) return;
    this.files.set(file.proto.name, { desc: file, bytes: toBinary(FileDescriptorProtoSchema, file.proto) });
    for (const t of nestedTypes(file)) {
      this.symbols.set(t.typeName, file.proto.name);
      if (t.kind === "message") {
        if (!this.extensionNumbers.has(t.typeName)) this.extensionNumbers.set(t.typeName, []);
        for (const f of t.fields) this.symbols.set(`${t.typeName}.${f.name}`, file.proto.name);
      }
      if (t.kind === "extension") {
        const extendee = t.extendee.typeName;
        this.extensionNumbers.set(extendee, [...(this.extensionNumbers.get(extendee) ?? []), t.number]);
        this.extensions.set(`${extendee}:${t.number}`, file.proto.name);
      }
      if (t.kind === "service") for (const m of t.methods) this.symbols.set(`${t.typeName}.${m.name}`, file.proto.name);
    }
    for (const dep of file.dependencies) this.add(dep);
  }

  /** One question; `sent` holds the files this stream already has, so dependencies go once. */
  answer(question: Question, sent: Set<string>): Answer {
    switch (question.case) {
      case "listServices":
        return { case: "listServicesResponse", value: { service: this.serviceNames.map((name) => ({ name })) } };
      case "fileByFilename":
        return this.filesFrom(question.value, sent, `file "${question.value}" not found`);
      case "fileContainingSymbol": {
        const file = this.symbols.get(question.value.replace(/^\./, ""));
        return this.filesFrom(file, sent, `symbol "${question.value}" not found`);
      }
      case "fileContainingExtension": {
        const { containingType, extensionNumber } = question.value;
        const file = this.extensions.get(`${containingType.replace(/^\./, "")}:${extensionNumber}`);
        return this.filesFrom(file, sent, `extension ${extensionNumber} of "${containingType}" not found`);
      }
      case "allExtensionNumbersOfType": {
        // Only extensions the contract defines (e.g. the capability option on FieldOptions).
        const numbers = this.extensionNumbers.get(question.value.replace(/^\./, ""));
        if (numbers === undefined) return notFound(`type "${question.value}" not found`);
        return { case: "allExtensionNumbersResponse", value: { baseTypeName: question.value, extensionNumber: numbers } };
      }
      default:
        return { case: "errorResponse", value: { errorCode: Code.InvalidArgument, errorMessage: "empty reflection request" } };
    }
  }

  /** The file, then each dependency this stream was not sent yet (the order protoc's clients expect). */
  private filesFrom(name: string | undefined, sent: Set<string>, missing: string): Answer {
    const root = name === undefined ? undefined : this.files.get(name);
    if (root === undefined) return notFound(missing);
    const out: Uint8Array[] = [root.bytes];
    sent.add(root.desc.proto.name);
    const visit = (file: DescFile) => {
      for (const dep of file.dependencies) {
        if (sent.has(dep.proto.name)) continue;
        sent.add(dep.proto.name);
        out.push(this.files.get(dep.proto.name)!.bytes);
        visit(dep);
      }
    };
    visit(root.desc);
    return { case: "fileDescriptorResponse", value: { fileDescriptorProto: out } };
  }
}

function notFound(message: string): Answer {
  return { case: "errorResponse", value: { errorCode: Code.NotFound, errorMessage: message } };
}

/**
 * A bidi stream's messages skip the validation interceptor (server/edge/validate.ts), so each
 * question is checked here against the same field rules; the edge bounds each message's size.
 */
function checked<T extends Message>(schema: DescMessage, req: T): T {
  const violation = requestViolation(schema, req);
  if (violation !== undefined) throw violation;
  return req;
}

function reflectionV1(index: ReflectionIndex): ServiceImpl<typeof v1.ServerReflection> {
  return {
    async *serverReflectionInfo(requests) {
      const sent = new Set<string>();
      for await (const req of requests) {
        const r = checked(v1.ServerReflectionRequestSchema, req);
        yield create(v1.ServerReflectionResponseSchema, {
          validHost: r.host,
          originalRequest: r,
          messageResponse: index.answer(r.messageRequest, sent),
        });
      }
    },
  };
}

function reflectionV1alpha(index: ReflectionIndex): ServiceImpl<typeof v1alpha.ServerReflection> {
  return {
    async *serverReflectionInfo(requests) {
      const sent = new Set<string>();
      for await (const req of requests) {
        const r = checked(v1alpha.ServerReflectionRequestSchema, req);
        yield create(v1alpha.ServerReflectionResponseSchema, {
          validHost: r.host,
          originalRequest: r,
          messageResponse: index.answer(r.messageRequest, sent),
        });
      }
    },
  };
}

/**
 * Serves both versions on `router`. The edge reads a stream's messages unbounded but for the
 * adapter's backstop, so each question's size is bounded here, as its envelope arrives (JSON
 * spells the same question in up to half again as many bytes).
 */
export function routeReflection(router: ConnectRouter, index: ReflectionIndex): void {
  const options = { readMaxBytes: Math.ceil(reflectionQuestionBytes * 1.5) };
  router.service(v1.ServerReflection, reflectionV1(index), options);
  router.service(v1alpha.ServerReflection, reflectionV1alpha(index), options);
}
