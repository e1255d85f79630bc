// Capability names, derived from the contract.
//
// Every JobSpec / JobResult oneof case carries a `(modelforge.jobs.v1.capability)` field option in
// proto/modelforge/jobs/v1/jobs.proto. That option is the only place a capability name is written
// down: this module reads it from the generated descriptors once, at module load, and everything
// else (server, agent, CLI) asks this module. There is deliberately no hand-kept table here.
//
// If the contract is ever inconsistent (a case without the option, a malformed or duplicated name,
// a result case naming a capability no spec case has), loading this module throws: that is a
// build-time mistake in the proto, and failing at start is better than mislabelling jobs later.

import { getOption, hasOption, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { capability, JobResultSchema, JobSpecSchema, type JobResult, type JobSpec } from "../gen/proto/modelforge/jobs/v1/jobs_pb.js";

/** A JobSpec oneof case (`spec.kind.case`) that is set. */
export type JobSpecCase = NonNullable<JobSpec["kind"]["case"]>;
/** A JobResult oneof case (`result.result.case`) that is set. */
export type JobResultCase = NonNullable<JobResult["result"]["case"]>;

/** The shape every capability name has: `<area>.<verb>.v<major>`, e.g. `artifact.acquire.v1`. */
export const CAPABILITY_NAME_PATTERN = /^[a-z]+\.[a-z]+\.v\d+$/;

/** A message names no capability (its oneof has no case set), or names one this build does not know. */
export class CapabilityError extends Error {
  override readonly name = "CapabilityError";
}

interface CaseInfo {
  /** Capability name from the field option. */
  readonly capability: string;
  /** The oneof case's field, for callers that want its proto name or number. */
  readonly field: DescField;
}

function readOneof(schema: DescMessage, oneofName: string): Map<string, CaseInfo> {
  const oneof = schema.oneofs.find((o) => o.name === oneofName);
  if (!oneof) {
    throw new Error(`contract: ${schema.typeName} has no oneof "${oneofName}"`);
  }
  const byCase = new Map<string, CaseInfo>();
  const seen = new Set<string>();
  // `schema.fields` is in declaration order; keep only this oneof's members.
  for (const field of schema.fields) {
    if (field.oneof !== oneof) continue;
    if (!hasOption(field, capability)) {
      throw new Error(`contract: ${schema.typeName}.${field.name} has no (modelforge.jobs.v1.capability) option`);
    }
    const name = getOption(field, capability);
    if (!CAPABILITY_NAME_PATTERN.test(name)) {
      throw new Error(`contract: ${schema.typeName}.${field.name} has a malformed capability name "${name}"`);
    }
    if (seen.has(name)) {
      throw new Error(`contract: capability "${name}" is declared twice in ${schema.typeName}`);
    }
    seen.add(name);
    byCase.set(field.localName, { capability: name, field });
  }
  return byCase;
}

const specCases = readOneof(JobSpecSchema, "kind");
const resultCases = readOneof(JobResultSchema, "result");

const specCaseByCapability = new Map<string, JobSpecCase>();
for (const [kase, info] of specCases) specCaseByCapability.set(info.capability, kase as JobSpecCase);

const resultCaseByCapability = new Map<string, JobResultCase>();
for (const [kase, info] of resultCases) {
  if (!specCaseByCapability.has(info.capability)) {
    throw new Error(`contract: JobResult.${info.field.name} names "${info.capability}", which no JobSpec case has`);
  }
  resultCaseByCapability.set(info.capability, kase as JobResultCase);
}

/** Every capability a JobSpec can carry, in the proto's field order. Frozen. */
export const allCapabilities: readonly string[] = Object.freeze([...specCaseByCapability.keys()]);

/**
 * The capability name of a job spec, e.g. `"artifact.acquire.v1"`.
 * @throws CapabilityError if the spec has no case set (or a case this build does not know).
 */
export function capabilityOfSpec(spec: JobSpec): string {
  const kase = spec.kind.case;
  if (kase === undefined) {
    throw new CapabilityError("job spec names no capability: exactly one kind must be set");
  }
  const info = specCases.get(kase);
  if (!info) throw new CapabilityError(`job spec has an unknown kind "${String(kase)}"`);
  return info.capability;
}

/** The capability a job result answers, or undefined if no case is set. */
export function capabilityOfResult(result: JobResult): string | undefined {
  const kase = result.result.case;
  if (kase === undefined) return undefined;
  return resultCases.get(kase)?.capability;
}

/** The capability name of a JobSpec oneof case (`"deploymentLoad"` -> `"deployment.load.v1"`). */
export function capabilityOfSpecCase(kase: JobSpecCase): string {
  const info = specCases.get(kase);
  if (!info) throw new CapabilityError(`unknown job spec kind "${String(kase)}"`);
  return info.capability;
}

/** The JobSpec oneof case that carries a capability, or undefined for an unknown name. */
export function specCaseForCapability(name: string): JobSpec["kind"]["case"] | undefined {
  return specCaseByCapability.get(name);
}

/** The JobResult oneof case that answers a capability, or undefined for an unknown name. */
export function resultCaseForCapability(name: string): JobResult["result"]["case"] | undefined {
  return resultCaseByCapability.get(name);
}

/** The proto field name of a JobSpec case (`"deploymentLoad"` -> `"deployment_load"`), for error paths. */
export function specFieldNameOfCase(kase: JobSpecCase): string {
  const info = specCases.get(kase);
  if (!info) throw new CapabilityError(`unknown job spec kind "${String(kase)}"`);
  return info.field.name;
}

/** Whether a name is one of this build's capabilities. */
export function isKnownCapability(name: string): boolean {
  return specCaseByCapability.has(name);
}

/**
 * Splits the names an agent advertises into this build's capabilities (deduplicated, in the order
 * given) and the rest (deduplicated). Unknown names, say from a newer agent, are not recorded but
 * reported back, so an agent is never refused for knowing more than the server.
 */
export function partitionCapabilities(names: readonly string[]): { known: string[]; unknown: string[] } {
  const known = new Set<string>();
  const unknown = new Set<string>();
  for (const name of names) (isKnownCapability(name) ? known : unknown).add(name);
  return { known: [...known], unknown: [...unknown] };
}
