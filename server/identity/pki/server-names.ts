import { isIP } from "node:net";

/** A subjectAltName entry in the shape forge's extension builder takes (type 2 = DNS, 7 = IP). */
export interface AltName {
  type: 2 | 7;
  value: string;
}

export interface ServerNames {
  altNames: AltName[];
  /** Comparable identity of each name ("dns:host", "ip:<hex bytes>"), independent of spelling. */
  keys: Set<string>;
}

const LABEL = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?";
const DNS_NAME_RE = new RegExp(`^(?:\\*\\.)?${LABEL}(?:\\.${LABEL})*$`);

/** Validates and de-duplicates the names a server certificate must cover. */
export function normalizeServerNames(names: readonly string[]): ServerNames {
  const altNames: AltName[] = [];
  const keys = new Set<string>();
  for (const raw of names) {
    const name = raw.trim();
    if (name === "") continue;
    const entry = isIP(name) ? ipAltName(name) : dnsAltName(name);
    const key = altNameKey(entry.type, entry.value);
    if (keys.has(key)) continue;
    keys.add(key);
    altNames.push(entry);
  }
  if (altNames.length === 0) throw new TypeError("a server certificate needs at least one DNS name or IP address");
  return { altNames, keys };
}

/** Key for a SAN entry; `value` is the DNS name or the raw address bytes as forge stores them. */
export function altNameKey(type: number, value: string): string {
  if (type === 2) return `dns:${value.toLowerCase()}`;
  if (type === 7) return `ip:${Buffer.from(value, "binary").toString("hex")}`;
  return `other${type}:${value}`;
}

function dnsAltName(name: string): AltName {
  const dns = name.toLowerCase().replace(/\.$/, "");
  if (dns.length > 253 || !DNS_NAME_RE.test(dns)) throw new TypeError(`not a valid DNS name or IP address: ${JSON.stringify(name)}`);
  return { type: 2, value: dns };
}

function ipAltName(ip: string): AltName {
  const bytes = isIP(ip) === 4 ? ipv4Bytes(ip) : ipv6Bytes(ip);
  return { type: 7, value: Buffer.from(bytes).toString("binary") };
}

function ipv4Bytes(ip: string): number[] {
  return ip.split(".").map(Number);
}

// Written out because forge's IPv6 parser does not handle embedded IPv4 ("::ffff:10.0.0.1").
function ipv6Bytes(ip: string): number[] {
  if (ip.includes("%")) throw new TypeError(`IPv6 zone ids cannot go in a certificate: ${ip}`);
  let text = ip;
  const tail: number[] = [];
  const lastColon = text.lastIndexOf(":");
  if (text.slice(lastColon + 1).includes(".")) {
    tail.push(...ipv4Bytes(text.slice(lastColon + 1)));
    text = `${text.slice(0, lastColon + 1)}0:0`;
  }
  const [head = "", rest] = text.split("::");
  const groupsOf = (part: string) => (part === "" ? [] : part.split(":").map((g) => parseInt(g, 16)));
  const left = groupsOf(head);
  const right = rest === undefined ? [] : groupsOf(rest);
  const groups = [...left, ...new Array<number>(8 - left.length - right.length).fill(0), ...right];
  const bytes = groups.flatMap((g) => [g >> 8, g & 0xff]);
  if (tail.length) bytes.splice(12, 4, ...tail);
  return bytes;
}
