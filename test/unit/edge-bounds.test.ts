// The Session's hand-written edge check (server/edge/validate.ts sessionMessageViolation, the
// bounds read from the annotations by server/edge/bounds.ts) against protovalidate reading the
// same annotations: for every bounded field of every message an agent's Session can send, values
// at the bound, one past it, and of the wrong form, each message with that one field set. Both
// must refuse the same ones, in the same words.
import { describe, expect, it } from "vitest";
import { create, ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { SessionRequestSchema } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { boundsOf, type FieldBounds } from "../../server/edge/bounds.js";
import { requestViolation, sessionMessageViolation } from "../../server/edge/validate.js";

const messages = new Map<string, DescMessage>();
const visit = (m: DescMessage) => {
  if (messages.has(m.typeName) || m.typeName.startsWith("google.protobuf.")) return;
  messages.set(m.typeName, m);
  for (const f of m.fields) if (f.message !== undefined) visit(f.message);
};
visit(SessionRequestSchema);

const uuid = "0b7c9a4e-2f1d-4c3b-9a8e-1d2c3b4a5f6e";

/** Strings at and past a string bound, and of the wrong form. */
function strings(b: FieldBounds | undefined): string[] {
  const s = b?.string;
  if (s === undefined) return ["x"];
  const out = ["", "x", "a\u0000b", "line\nbreak"];
  if (s.uuid) out.push(uuid, `${uuid}0`, "not-a-uuid");
  if (s.maxBytes !== undefined) out.push("a".repeat(s.maxBytes), "a".repeat(s.maxBytes + 1), "é".repeat(Math.ceil((s.maxBytes + 1) / 2)));
  return out;
}

function numbers(b: FieldBounds): number[] {
  if (b.range === undefined) return [0, 1];
  const [lo, hi] = b.range;
  return [lo, hi, ...(Number.isFinite(lo) && lo > 0 ? [lo - 1] : []), hi + (hi < 1 ? 0.5 : 1), hi / 2];
}

/** Values for one field: each a way to set it. */
function valuesOf(f: DescField): unknown[] {
  const b = boundsOf(f);
  switch (f.fieldKind) {
    case "scalar":
      if (f.scalar === ScalarType.STRING) return strings(b);
      if (f.scalar === ScalarType.BYTES)
        return b.bytesMax === undefined ? [] : [new Uint8Array(b.bytesMax), new Uint8Array(b.bytesMax + 1)];
      if (f.scalar === ScalarType.DOUBLE || f.scalar === ScalarType.FLOAT) return numbers(b);
      if (f.scalar === ScalarType.UINT32) return numbers(b).filter(Number.isInteger);
      if (f.scalar === ScalarType.UINT64)
        return numbers(b)
          .filter(Number.isInteger)
          .map((n) => BigInt(n));
      return [];
    case "message":
      if (f.message.typeName === "google.protobuf.DoubleValue" || f.message.typeName === "google.protobuf.UInt32Value") {
        return numbers(b).map((value) => ({ value }));
      }
      return [];
    case "list": {
      const max = b.maxCount ?? 0;
      const item = f.listKind === "scalar" ? strings(b.items)[1] : f.listKind === "enum" ? 0 : {};
      const lists = [Array(max).fill(item), Array(max + 1).fill(item)];
      if (f.listKind === "scalar" && f.scalar === ScalarType.STRING) for (const s of strings(b.items)) lists.push([s]);
      return lists;
    }
    case "map": {
      const max = b.maxCount ?? 0;
      const entries = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, "v"]));
      const maps: Record<string, unknown>[] = [entries(max), entries(max + 1)];
      for (const k of strings(b.keys)) maps.push({ [k]: "v" });
      if (f.mapKind === "scalar") for (const v of strings(b.values)) maps.push({ k: v });
      return maps;
    }
    default:
      return [];
  }
}

const cases = [...messages.values()].flatMap((m) =>
  m.fields.flatMap((f) => valuesOf(f).map((value, i) => [`${m.typeName}.${f.name} #${i}`, m, f, value] as const)),
);

describe("the Session's edge check agrees with protovalidate", () => {
  it("covers every bounded field", () => {
    expect(cases.length).toBeGreaterThan(200);
  });

  it.each(cases)("%s", (_name, desc, field, value) => {
    const message = create(desc, { [field.localName]: value } as never);
    const walked = sessionMessageViolation(desc, message)?.rawMessage;
    const standard = requestViolation(desc, message)?.rawMessage;
    // protovalidate names a control character in a pattern field without its code point.
    expect(walked?.replace(/ \(U\+[0-9A-F]{4}\)$/, "")).toEqual(standard?.replace(/ \(U\+[0-9A-F]{4}\)$/, ""));
  });
});
