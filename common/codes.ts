// Connect codes by their wire names ("invalid_argument"), as used in Session ReplyError messages.
import { Code } from "@connectrpc/connect";

export function codeName(code: Code): string {
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}
