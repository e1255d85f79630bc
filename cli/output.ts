// Machine output: the protobuf JSON form of a response, exactly as the API defines it.
import { toJson, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import type { Context } from "./args.js";

/** One pretty-printed JSON document (for --json on a one-shot command). */
export function printJson<D extends DescMessage>(ctx: Context, schema: D, message: MessageShape<D>): void {
  ctx.out(`${JSON.stringify(toJson(schema, message), null, 2)}\n`);
}

/** One compact JSON document on one line (for --json on a streaming command: NDJSON). */
export function printJsonLine<D extends DescMessage>(ctx: Context, schema: D, message: MessageShape<D>): void {
  ctx.out(`${JSON.stringify(toJson(schema, message))}\n`);
}
