// How a command prints its answer: with --json the protobuf JSON form of the response, exactly as
// the API defines it; otherwise text for a person.
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

/** A one-shot command's answer: the response with --json, else `text` of it. Exit status 0. */
export function printReply<D extends DescMessage>(
  ctx: Context,
  schema: D,
  res: MessageShape<D>,
  text: (res: MessageShape<D>) => string,
): number {
  if (ctx.json) printJson(ctx, schema, res);
  else ctx.out(text(res));
  return 0;
}

/** What a list shows a person: its items, the sentence said when there are none, and their table. */
export interface ListView<T> {
  items: T[];
  /** E.g. "No nodes.\n". */
  empty: string;
  table(items: T[]): string;
}

/** A list's answer: `message` with --json, else the sentence for none or the table. */
export function printList<D extends DescMessage, T>(ctx: Context, schema: D, message: MessageShape<D>, view: ListView<T>): void {
  if (ctx.json) printJson(ctx, schema, message);
  else if (view.items.length === 0) ctx.out(view.empty);
  else ctx.out(view.table(view.items));
}
