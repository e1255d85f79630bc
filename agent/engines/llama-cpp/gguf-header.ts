// A cheap check of a GGUF file before llama.cpp reads it: a header whose counts cannot fit in the
// file made its metadata reader spin for minutes instead of failing, and a file cut short fails
// inside llama-server, whose log thread may lose the lines that say so at exit. Refusing either
// here makes a corrupt model a quick "cannot be loaded" that names the cause. And the context
// length the model was trained with, which a profile's context size 0 means.
import { open } from "node:fs/promises";
import { gguf, type GGUFParseOutput } from "@huggingface/gguf";
import { ggmlTensorBytes } from "../../../common/gguf-tensors.js";

/** Smallest possible encodings: a tensor info and a metadata key/value. */
const minTensorInfoBytes = 33;
const minKeyValueBytes = 14;
const headerBytes = 24;

/** Returns why the header is unusable, or undefined when it is plausible. */
export function ggufHeaderProblem(header: Buffer, fileSize: number): string | undefined {
  if (header.length < headerBytes) return "the file is too short to be GGUF";
  if (header.toString("latin1", 0, 4) !== "GGUF") return "the file is not GGUF (bad magic)";
  const version = header.readUInt32LE(4);
  if (version !== 2 && version !== 3) return `GGUF version ${version} is not supported`;
  const tensors = header.readBigUInt64LE(8);
  const keyValues = header.readBigUInt64LE(16);
  const least = BigInt(headerBytes) + tensors * BigInt(minTensorInfoBytes) + keyValues * BigInt(minKeyValueBytes);
  if (least > BigInt(fileSize)) return "the header's tensor and metadata counts cannot fit in the file";
  return undefined;
}

/**
 * Why the file is shorter than its tensors, or undefined. A tensor of a type whose size is not
 * known is left to llama.cpp.
 */
export function ggufTruncation(parsed: Pick<GGUFParseOutput, "tensorDataOffset" | "tensorInfos">, fileSize: number): string | undefined {
  let end = 0n;
  for (const t of parsed.tensorInfos) {
    const bytes = ggmlTensorBytes(t);
    if (bytes === undefined) continue;
    const last = parsed.tensorDataOffset + t.offset + BigInt(bytes);
    if (last > end) end = last;
  }
  if (end <= BigInt(fileSize)) return undefined;
  return `the file is truncated: its tensors end at byte ${end}, and it has ${fileSize}`;
}

/** What the agent reads of a model before it starts llama.cpp on it. */
export interface GgufInspection {
  /** The context length the model was trained with; undefined when the header has none. */
  trainedContextLength: number | undefined;
}

/**
 * Refuses a file whose header is implausible or that is shorter than its tensors, and reads the
 * trained context length. The header is read by @huggingface/gguf, which bounds what a hostile
 * header can cost; a header it cannot read (a format newer than it) is left to llama.cpp.
 */
export async function inspectGgufFile(path: string): Promise<GgufInspection> {
  const size = await checkHeader(path);
  let parsed: GGUFParseOutput<{ strict: false }>;
  try {
    parsed = await gguf(path, { allowLocalFile: true });
  } catch {
    return { trainedContextLength: undefined };
  }
  const truncated = ggufTruncation(parsed, size);
  if (truncated !== undefined) throw new Error(truncated);
  return { trainedContextLength: contextLengthOf(parsed.metadata) };
}

/** The header's plausibility; the file's size. */
async function checkHeader(path: string): Promise<number> {
  const fh = await open(path, "r");
  try {
    const { size } = await fh.stat();
    const header = Buffer.alloc(headerBytes);
    const { bytesRead } = await fh.read(header, 0, headerBytes, 0);
    const problem = ggufHeaderProblem(header.subarray(0, bytesRead), size);
    if (problem) throw new Error(problem);
    return size;
  } finally {
    await fh.close();
  }
}

/** `<architecture>.context_length`, when the header has a usable one. */
function contextLengthOf(metadata: Record<string, unknown>): number | undefined {
  const architecture = metadata["general.architecture"];
  const length = typeof architecture === "string" ? metadata[`${architecture}.context_length`] : undefined;
  const n = typeof length === "bigint" ? Number(length) : length;
  return typeof n === "number" && Number.isSafeInteger(n) && n > 0 ? n : undefined;
}
