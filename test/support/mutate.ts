// Random damage to an encoded message, for fuzzing a hand-written decoder against the general one.

/** `bytes` with one to three bytes flipped, dropped or inserted, drawn from `next` (in [0, 1)). */
export function mutated(bytes: Uint8Array, next: () => number): Uint8Array {
  const out = Array.from(bytes);
  for (let k = 1 + Math.floor(next() * 3); k > 0; k--) {
    const at = Math.floor(next() * (out.length + 1));
    const op = next();
    if (op < 0.5 && at < out.length) out[at] = Math.floor(next() * 256);
    else if (op < 0.75) out.splice(at, 1);
    else out.splice(at, 0, Math.floor(next() * 256));
  }
  return Uint8Array.from(out);
}
