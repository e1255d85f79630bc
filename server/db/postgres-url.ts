// A PostgreSQL URL made safe to log: parsed once, described without its password, and every
// secret it holds redacted from driver messages. Pure.
import { DatabaseOpenError } from "./errors.js";

export interface ParsedUrl {
  connectionString: string;
  describe: string;
  secrets: string[];
}

export function parsePostgresUrl(raw: string): ParsedUrl {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    // Never echo the URL: it may hold a password.
    throw new DatabaseOpenError("database URL is not a valid URL (expected postgresql://user:password@host:5432/database)", {
      kind: "postgres",
    });
  }
  if (url.protocol !== "postgres:" && url.protocol !== "postgresql:") {
    throw new DatabaseOpenError(
      `unsupported database URL scheme "${url.protocol}" (expected postgresql:// or postgres://, or no URL for the embedded database)`,
    );
  }

  const secrets: string[] = [];
  if (url.password) {
    secrets.push(url.password);
    try {
      secrets.push(decodeURIComponent(url.password));
    } catch {
      /* keep the raw form only */
    }
  }
  const paramPassword = url.searchParams.get("password");
  if (paramPassword) secrets.push(paramPassword);

  const schema = url.searchParams.get("schema");
  if (schema !== null && schema !== "public") {
    throw new DatabaseOpenError(`the database URL's ?schema=${schema} is not supported: the migrations create their tables in "public"`, {
      kind: "postgres",
    });
  }
  url.searchParams.delete("schema");

  // Both Prisma adapters turn a timestamptz into a Date by replacing the offset the server
  // printed with +00:00 instead of converting it, and write Dates as zone-less text that the
  // server reads in the session's time zone. With a server or database whose TimeZone is not UTC
  // every stored instant would be off by the offset, so each session is pinned to UTC.
  const options = url.searchParams.get("options");
  url.searchParams.set("options", `${options ? `${options} ` : ""}-c TimeZone=UTC`);

  const host = url.host || url.searchParams.get("host") || "localhost";
  const hostPort = /:\d+$/.test(host) || host.startsWith("/") ? host : `${host}:5432`;
  let database = url.pathname.replace(/^\//, "");
  try {
    database = decodeURIComponent(database);
  } catch {
    /* keep as written */
  }
  return {
    connectionString: url.toString(),
    describe: `postgresql://${hostPort}/${database}`,
    secrets: [...new Set(secrets)].filter((s) => s.length >= 3),
  };
}

export function redact(text: string, secrets: string[]): string {
  let out = text;
  for (const s of secrets) out = out.split(s).join("***");
  return out;
}
