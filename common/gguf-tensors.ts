// The bytes a GGUF tensor takes in the file, by its ggml type: read by the server to price a
// model's memory and by the agent to find a file cut short before llama.cpp reads it.

/**
 * Elements per block and bytes per block of each ggml tensor type (ggml's type traits).
 */
const BLOCKS: { [dtype: number]: [elements: number, bytes: number] } = {
  0: [1, 4], // F32
  1: [1, 2], // F16
  2: [32, 18], // Q4_0
  3: [32, 20], // Q4_1
  6: [32, 22], // Q5_0
  7: [32, 24], // Q5_1
  8: [32, 34], // Q8_0
  9: [32, 40], // Q8_1
  10: [256, 84], // Q2_K
  11: [256, 110], // Q3_K
  12: [256, 144], // Q4_K
  13: [256, 176], // Q5_K
  14: [256, 210], // Q6_K
  15: [256, 292], // Q8_K
  16: [256, 66], // IQ2_XXS
  17: [256, 74], // IQ2_XS
  18: [256, 98], // IQ3_XXS
  19: [256, 50], // IQ1_S
  20: [32, 18], // IQ4_NL
  21: [256, 110], // IQ3_S
  22: [256, 82], // IQ2_S
  23: [256, 136], // IQ4_XS
  24: [1, 1], // I8
  25: [1, 2], // I16
  26: [1, 4], // I32
  27: [1, 8], // I64
  28: [1, 8], // F64
  29: [256, 56], // IQ1_M
  30: [1, 2], // BF16
  34: [256, 54], // TQ1_0
  35: [256, 66], // TQ2_0
  39: [32, 17], // MXFP4
};

/** A tensor's bytes in the file; undefined for a type not in the table (rather than a guess). */
export function ggmlTensorBytes(t: { dtype: number; shape: readonly bigint[] }): number | undefined {
  const block = BLOCKS[t.dtype];
  if (block === undefined) return undefined;
  const elements = t.shape.reduce((n, d) => n * Number(d), 1);
  return Math.ceil(elements / block[0]) * block[1];
}
