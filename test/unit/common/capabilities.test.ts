import { create, getOption, hasOption } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  allCapabilities,
  CAPABILITY_NAME_PATTERN,
  CapabilityError,
  capabilityOfResult,
  capabilityOfSpec,
  capabilityOfSpecCase,
  isKnownCapability,
  resultCaseForCapability,
  specCaseForCapability,
  specFieldNameOfCase,
  type JobSpecCase,
} from "../../../common/capabilities.js";
import {
  capability,
  HealthResultSchema,
  JobResultSchema,
  JobSpecSchema,
  RuntimeHealthSchema,
  type JobResult,
  type JobSpec,
} from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";

const EXPECTED = [
  "artifact.acquire.v1",
  "runtime.probe.v1",
  "runtime.health.v1",
  "runtime.unload.v1",
  "deployment.load.v1",
  "deployment.invoke.v1",
  "deployment.health.v1",
  "deployment.drain.v1",
  "deployment.unload.v1",
];

const kindOneof = JobSpecSchema.oneofs.find((o) => o.name === "kind")!;
const resultOneof = JobResultSchema.oneofs.find((o) => o.name === "result")!;

function specWithCase(kase: JobSpecCase): JobSpec {
  // Every case's message type has only optional/scalar fields, so an empty message is fine here.
  const field = JobSpecSchema.field[kase]!;
  if (field.fieldKind !== "message") throw new Error("expected message field");
  return create(JobSpecSchema, { kind: { case: kase, value: create(field.message) } } as never);
}

describe("capabilities from the proto", () => {
  it("every JobSpec and JobResult oneof field carries the capability option", () => {
    expect(kindOneof.fields).toHaveLength(9);
    for (const field of [...kindOneof.fields, ...resultOneof.fields]) {
      expect(hasOption(field, capability), field.name).toBe(true);
      expect(getOption(field, capability), field.name).toMatch(/^[a-z]+\.[a-z]+\.v\d+$/);
    }
  });

  it("lists exactly the nine capabilities, in field order", () => {
    expect(allCapabilities).toEqual(EXPECTED);
    expect(Object.isFrozen(allCapabilities)).toBe(true);
    for (const name of allCapabilities) expect(name).toMatch(CAPABILITY_NAME_PATTERN);
    const numbers = kindOneof.fields.map((f) => f.number);
    expect(numbers).toEqual([...numbers].sort((a, b) => a - b));
  });

  it.each(kindOneof.fields.map((f) => [f.localName, getOption(f, capability)] as const))("spec case %s is %s, both ways", (kase, name) => {
    const spec = specWithCase(kase as JobSpecCase);
    expect(capabilityOfSpec(spec)).toBe(name);
    expect(capabilityOfSpecCase(kase as JobSpecCase)).toBe(name);
    expect(specCaseForCapability(name)).toBe(kase);
    expect(isKnownCapability(name)).toBe(true);
  });

  it("maps JobResult cases to the same names as the JobSpec cases", () => {
    expect(resultOneof.fields.map((f) => getOption(f, capability))).toEqual(EXPECTED);
    for (const field of resultOneof.fields) {
      if (field.fieldKind !== "message") throw new Error("expected message field");
      const result = create(JobResultSchema, {
        result: { case: field.localName, value: create(field.message) },
      } as never) as JobResult;
      const name = capabilityOfResult(result);
      expect(name).toBe(getOption(field, capability));
      expect(resultCaseForCapability(name!)).toBe(field.localName);
      // The spec case with the same capability has the same proto field name and number.
      const specCase = specCaseForCapability(name!)!;
      expect(specFieldNameOfCase(specCase)).toBe(field.name);
      expect(JobSpecSchema.field[specCase]!.number).toBe(field.number);
    }
  });

  it("tells the two health results apart although they share a message type", () => {
    const runtime = create(JobResultSchema, { result: { case: "runtimeHealth", value: create(HealthResultSchema) } });
    const deployment = create(JobResultSchema, {
      result: { case: "deploymentHealth", value: create(HealthResultSchema) },
    });
    expect(capabilityOfResult(runtime)).toBe("runtime.health.v1");
    expect(capabilityOfResult(deployment)).toBe("deployment.health.v1");
  });

  it("a spec with no case throws a CapabilityError; a result with no case has no capability", () => {
    expect(() => capabilityOfSpec(create(JobSpecSchema))).toThrow(CapabilityError);
    expect(() => capabilityOfSpec(create(JobSpecSchema))).toThrow(/names no capability/);
    expect(capabilityOfResult(create(JobResultSchema))).toBeUndefined();
  });

  it("unknown names and cases are refused", () => {
    for (const name of ["", "artifact.acquire.v2", "artifact_acquire", "ARTIFACT.ACQUIRE.V1", "shell.exec.v1"]) {
      expect(specCaseForCapability(name)).toBeUndefined();
      expect(resultCaseForCapability(name)).toBeUndefined();
      expect(isKnownCapability(name)).toBe(false);
    }
    const bogus = { kind: { case: "shellExec", value: create(RuntimeHealthSchema) } } as unknown as JobSpec;
    expect(() => capabilityOfSpec(bogus)).toThrow(CapabilityError);
  });
});
