// The contract's bounds (buf.validate annotations in proto/) checked by protovalidate, the
// library every language's clients can check them with too; its first violation is told in the
// edge's own words ("name: is longer than 64 bytes"), naming the field by its proto path.
import { Code, ConnectError } from "@connectrpc/connect";
import type { DescMessage, Message } from "@bufbuild/protobuf";
import type { Path } from "@bufbuild/protobuf/reflect";
import { createValidator, type Violation } from "@bufbuild/protovalidate";
import { boundsOf } from "./bounds.js";

const validator = createValidator({ failFast: true });

/** The first bound `message` breaks, as invalid_argument; undefined when it keeps them all. */
export function boundsViolation(desc: DescMessage, message: Message): ConnectError | undefined {
  const result = validator.validate(desc, message as never);
  if (result.kind === "valid") return undefined;
  if (result.kind === "error") throw result.error;
  const first = result.error.violations[0]!;
  return new ConnectError(`${pathText(first)}: ${reasonOf(first, message)}`, Code.InvalidArgument);
}

/** "files[2].path", `labels["zone"]`, or "labels key" for a map's key. */
export function pathText(v: Pick<Violation, "field" | "forKey">): string {
  let text = "";
  for (const item of v.field as Path) {
    if (item.kind === "list_sub") text += `[${item.index}]`;
    else if (item.kind === "map_sub") text += v.forKey ? "" : `[${JSON.stringify(String(item.key))}]`;
    else text += text === "" ? item.name : `.${item.name}`;
  }
  return v.forKey ? `${text} key` : text;
}

/** The rule broken, in the edge's words; the bound comes from the rule's own text. */
function reasonOf(v: Violation, message: Message): string {
  const bound = /\d+(\.\d+)?/.exec(v.message)?.[0];
  switch (v.ruleId) {
    case "string.max_bytes":
    case "bytes.max_len":
      return `is longer than ${bound} bytes`;
    case "string.min_bytes":
      return "must not be empty";
    case "string.uuid":
      return "is not a UUID (8-4-4-4-12 hexadecimal digits)";
    case "string.pattern":
      return "contains a control character";
    case "repeated.max_items":
    case "map.max_pairs":
      return `has ${countAt(v, message)} entries; at most ${bound} are accepted`;
    default: {
      // Ranges ("double.gte_lte", "uint32.lte", ...), as the annotation states them.
      const range = rangeOf(v);
      return range !== undefined ? `must be from ${range[0]} to ${range[1]}` : v.message;
    }
  }
}

/** The annotated range of the field a violation names. */
function rangeOf(v: Violation): readonly [number, number] | undefined {
  const last = (v.field as Path).at(-1);
  return last !== undefined && last.kind === "field" ? boundsOf(last).range : undefined;
}

/** The number of entries of the list or map the violation names. */
function countAt(v: Violation, message: Message): number {
  let value: unknown = message;
  for (const item of v.field as Path) {
    if (value === undefined || value === null) return 0;
    if (item.kind === "list_sub") value = (value as unknown[])[item.index];
    else if (item.kind === "map_sub") value = (value as Record<string, unknown>)[String(item.key)];
    else value = (value as Record<string, unknown>)[(item as { localName: string }).localName];
  }
  if (Array.isArray(value)) return value.length;
  return value !== null && typeof value === "object" ? Object.keys(value).length : 0;
}
