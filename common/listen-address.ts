// Where an auxiliary plain-HTTP listener (the Prometheus endpoints) binds: "PORT", "HOST:PORT" or
// "[IPv6]:PORT". A bare port means loopback: an address off the machine has to be written out.
// Hosts are IP literals or "localhost" only, so what is exposed never depends on DNS.
import { isIP } from "node:net";

export interface ListenAddress {
  host: string;
  port: number;
}

export function parseListenAddress(text: string): ListenAddress {
  const t = text.trim();
  const m = /^(?:(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]+)):)?(\d{1,5})$/.exec(t);
  const fail = () => new Error(`expected PORT, HOST:PORT or [IPv6]:PORT with an IP address or localhost, got "${text}"`);
  if (!m) throw fail();
  const port = Number(m[3]);
  if (port > 65535) throw fail();
  const host = m[1] ?? m[2] ?? "127.0.0.1";
  if (m[1] !== undefined ? isIP(host) !== 6 : host !== "localhost" && isIP(host) !== 4) throw fail();
  return { host, port };
}
