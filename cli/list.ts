// `forge <group> list`: fetch every page of a list RPC, then print them all as one response with
// --json, else a table (or a sentence when there is nothing to list).
import { create, type DescField, type DescMessage, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { command, type Command, type OptionDef, type OptionValues } from "./args.js";
import type { AdminClient } from "./client.js";
import { printList } from "./output.js";

/** The page size list commands ask for: the servers' most. */
const pageSize = 1000;

export interface PageRequest {
  pageSize: number;
  pageToken: string;
}

/** The type of a list response's items: the element type of its one repeated field. */
type ItemOf<M> = { [K in keyof M]: K extends "$unknown" ? never : M[K] extends readonly (infer T)[] ? T : never }[keyof M];

export interface PagedList<D extends DescMessage, F> {
  options?: Record<string, OptionDef>;
  /** The request's filters, from the options; parsed before anything is sent. */
  filter?(values: OptionValues): F;
  /** The RPC's response; --json prints every page's items as one of these. */
  schema: D;
  /** One page of the RPC. */
  fetch(client: AdminClient, page: PageRequest, filter: F): Promise<MessageShape<D> & { nextPageToken: string }>;
  /** Said when there is nothing to list, e.g. "No nodes.\n". */
  empty: string | ((filter: F) => string);
  table(items: ItemOf<MessageShape<D>>[], now: Date): string;
}

/** A list response's one repeated field, which holds its items. */
function itemsField(schema: DescMessage): DescField {
  const lists = schema.fields.filter((f) => f.fieldKind === "list");
  if (lists.length !== 1) throw new Error(`${schema.typeName} is not a list response: it has ${lists.length} repeated fields`);
  return lists[0]!;
}

/** The `list` command of a group: `summary` in help, `list` for what it asks and shows. */
export function pagedListCommand<D extends DescMessage, F = undefined>(summary: string, list: PagedList<D, F>): Command {
  const field = itemsField(list.schema).localName;
  return command("list", summary, {
    ...(list.options ? { options: list.options } : {}),
    async run(ctx, values) {
      const filter = list.filter?.(values) as F;
      const client = ctx.client();
      const items: ItemOf<MessageShape<D>>[] = [];
      let pageToken = "";
      do {
        const page = await list.fetch(client, { pageSize, pageToken }, filter);
        items.push(...(page[field as keyof typeof page] as ItemOf<MessageShape<D>>[]));
        pageToken = page.nextPageToken;
      } while (pageToken !== "");
      const message = create(list.schema, { [field]: items } as MessageInitShape<D>);
      const empty = typeof list.empty === "string" ? list.empty : list.empty(filter);
      printList(ctx, list.schema, message, { items, empty, table: (all) => list.table(all, ctx.now()) });
      return 0;
    },
  });
}
