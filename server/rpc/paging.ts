// Page tokens for list RPCs: opaque to clients, validated here.
import { Code, ConnectError } from "@connectrpc/connect";

export function pageSizeOf(requested: number): number {
  if (requested === 0) return 100;
  return Math.min(requested, 1000);
}

export function encodePageToken(position: string): string {
  return Buffer.from(position, "utf8").toString("base64url");
}

export function decodeOffset(token: string): number {
  if (token === "") return 0;
  const n = Number(Buffer.from(token, "base64url").toString("utf8"));
  if (!Number.isSafeInteger(n) || n < 0) throw new ConnectError("page_token is not valid", Code.InvalidArgument);
  return n;
}

export function decodeSeq(token: string): bigint | undefined {
  if (token === "") return undefined;
  const text = Buffer.from(token, "base64url").toString("utf8");
  if (!/^\d{1,20}$/.test(text)) throw new ConnectError("page_token is not valid", Code.InvalidArgument);
  return BigInt(text);
}

/** Splits a `take: size + 1` query result into a page and whether more follow. */
export function splitPage<T>(rows: T[], size: number): { page: T[]; more: boolean } {
  return { page: rows.slice(0, size), more: rows.length > size };
}

/**
 * How many of the leading items, of these encoded sizes, one page holds within `maxBytes`: at
 * least one (a single item larger than the budget still travels alone), never more than given.
 */
export function countWithin(sizes: number[], maxBytes: number): number {
  let bytes = 0;
  for (let i = 0; i < sizes.length; i++) {
    bytes += sizes[i]!;
    if (i > 0 && bytes > maxBytes) return i;
  }
  return sizes.length;
}
