import { randomBytes } from "node:crypto";

/**
 * Random 128-bit serial as lowercase hex for node-forge. The first byte is forced into
 * 0x01..0x7f: a clear high bit keeps the DER INTEGER positive, a non-zero byte keeps the
 * encoding minimal (forge writes the bytes verbatim), so every serial is exactly 16 bytes.
 */
export function randomSerialHex(): string {
  const bytes = randomBytes(16);
  bytes[0] = bytes[0]! & 0x7f || 0x01;
  return bytes.toString("hex");
}

/**
 * Normalizes a serial number to the form Node reports in `X509Certificate.serialNumber`
 * and `getPeerCertificate().serialNumber`: uppercase hex, whole bytes, no leading zero bytes.
 * Accepts any case, an optional `0x` prefix and `:` separators.
 */
export function canonicalSerial(hex: string): string {
  let s = hex.trim().replace(/^0x/i, "").replace(/:/g, "").toUpperCase();
  if (!/^[0-9A-F]+$/.test(s)) throw new TypeError(`not a hexadecimal serial number: ${JSON.stringify(hex)}`);
  s = s.replace(/^0+/, "");
  if (s.length % 2 === 1) s = `0${s}`;
  return s === "" ? "00" : s;
}
