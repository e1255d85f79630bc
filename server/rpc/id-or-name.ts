// Records an RPC names by id or by name (a deployment: its UUID or its name).
import { isUuid } from "../../common/x509.js";

/** The Prisma filter for a record named by its id (a UUID, any case) or by its name. */
export function whereIdOrName(idOrName: string): { id: string } | { name: string } {
  return isUuid(idOrName) ? { id: idOrName.toLowerCase() } : { name: idOrName };
}
