// A job's spec from a form generated out of the contract: the capability's JobSpec case message,
// one input per field (text, number, checkbox, enum select, duration; JSON for lists and nested
// messages), read back as protobuf JSON. A new capability in the proto gets a form with no code here.
import { fromJson, ScalarType, type DescField, type JsonValue } from "@bufbuild/protobuf";
import { JobSpecSchema, type JobSpec } from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { specCaseForCapability } from "../../../common/capabilities.js";
import { h } from "../dom.js";
import { parseDurationSeconds } from "../format.js";

function caseField(capability: string): DescField {
  const kase = specCaseForCapability(capability);
  const field = JobSpecSchema.fields.find((f) => f.localName === kase);
  if (field === undefined || field.message === undefined) throw new Error(`unknown capability ${capability}`);
  return field;
}

const numeric = new Set([ScalarType.UINT32, ScalarType.INT32, ScalarType.UINT64, ScalarType.INT64, ScalarType.DOUBLE, ScalarType.FLOAT]);

function input(f: DescField): HTMLElement {
  const name = `f.${f.jsonName}`;
  const attrs = { name, "data-testid": `field-${f.name}` };
  if (f.fieldKind === "scalar" && f.scalar === ScalarType.BOOL) return h("input", { ...attrs, type: "checkbox" });
  if (f.fieldKind === "scalar" && numeric.has(f.scalar)) return h("input", { ...attrs, type: "number", min: 0 });
  if (f.fieldKind === "scalar") return h("input", { ...attrs, type: "text" });
  if (f.fieldKind === "enum") return h("select", attrs, ...f.enum.values.map((v) => h("option", { value: v.name }, v.name)));
  if (f.fieldKind === "message" && f.message.typeName === "google.protobuf.Duration") {
    return h("input", { ...attrs, type: "text", placeholder: "e.g. 30s, 5m" });
  }
  return h("textarea", { ...attrs, rows: 3, placeholder: f.fieldKind === "list" ? "JSON array, e.g. []" : "JSON" });
}

/** The inputs of a capability's form. */
export function capabilityFields(capability: string): HTMLElement[] {
  return caseField(capability).message!.fields.map((f) => h("label", {}, f.name, " ", input(f)));
}

/** The JobSpec the form's values describe (values keyed as the inputs are named). */
export function specFrom(capability: string, values: Record<string, string>): JobSpec {
  const field = caseField(capability);
  const obj: Record<string, JsonValue> = {};
  for (const f of field.message!.fields) {
    const raw = values[`f.${f.jsonName}`] ?? "";
    if (f.fieldKind === "scalar" && f.scalar === ScalarType.BOOL) {
      if (raw === "on") obj[f.jsonName] = true;
      continue;
    }
    if (raw.trim() === "") continue;
    if (f.fieldKind === "scalar" && numeric.has(f.scalar)) obj[f.jsonName] = raw.trim();
    else if (f.fieldKind === "scalar" || f.fieldKind === "enum") obj[f.jsonName] = raw;
    else if (f.fieldKind === "message" && f.message.typeName === "google.protobuf.Duration")
      obj[f.jsonName] = `${parseDurationSeconds(raw)}s`;
    else obj[f.jsonName] = JSON.parse(raw) as JsonValue;
  }
  return fromJson(JobSpecSchema, { [field.jsonName]: obj });
}
