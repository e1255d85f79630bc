// The node a request names by id: its record, or a typed error. Here, below the node lifecycle,
// because enrollment's recovery tokens look nodes up too.
import { Code, ConnectError } from "@connectrpc/connect";
import type { Prisma } from "../../gen/prisma/client.js";

export async function findNodeOrThrow(tx: Pick<Prisma.TransactionClient, "node">, nodeId: string) {
  if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(nodeId)) {
    throw new ConnectError("node_id must be a UUID", Code.InvalidArgument);
  }
  const node = await tx.node.findUnique({ where: { id: nodeId.toLowerCase() } });
  if (node === null) throw new ConnectError(`node ${nodeId} not found`, Code.NotFound);
  return node;
}
