// Conversions every handler shares between database values and API messages. A feature's own
// rows have their converters beside it (../nodes/codec.ts, ../jobs/codec.ts, ...).
import { timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";

export const ts = (d: Date | null | undefined): Timestamp | undefined => (d ? timestampFromDate(d) : undefined);

export function stringMap(json: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (json !== null && typeof json === "object" && !Array.isArray(json)) {
    for (const [k, v] of Object.entries(json)) if (typeof v === "string") out[k] = v;
  }
  return out;
}
