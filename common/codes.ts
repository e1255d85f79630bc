// Connect codes by their wire names ("invalid_argument"), as used in Session ReplyError messages.
import { Code } from "@connectrpc/connect";

export function codeName(code: Code): string {
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}

export function codeFromName(name: string): Code | undefined {
  const key = (Object.keys(Code) as (keyof typeof Code)[]).find((k) => typeof Code[k] === "number" && codeName(Code[k]) === name);
  return key === undefined ? undefined : Code[key];
}
