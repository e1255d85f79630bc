// Sizes in configuration: "65536", "64KiB", "1MiB", "2GiB" (powers of 1024, as the names say).
const units: Record<string, number> = { "": 1, KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3 };

export function parseByteSize(text: string): number {
  const m = /^(\d+)(KiB|MiB|GiB)?$/.exec(text.trim());
  if (!m) throw new Error(`expected a size such as 65536, 64KiB, 1MiB or 2GiB, got "${text}"`);
  const bytes = Number(m[1]) * units[m[2] ?? ""]!;
  if (!Number.isSafeInteger(bytes) || bytes <= 0) throw new Error(`expected a positive size, got "${text}"`);
  return bytes;
}
