// A cheap check of a GGUF file's header before llama.cpp reads it: a header whose counts cannot
// fit in the file made its metadata reader spin for minutes instead of failing. Refusing it here
// makes a corrupt model a quick "failed to load" rather than a burnt health deadline. And the
// context length the model was trained with, which a profile's context size 0 means.
import { open } from "node:fs/promises";
import { gguf } from "@huggingface/gguf";

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

export async function checkGgufFile(path: string): Promise<void> {
  const fh = await open(path, "r");
  try {
    const { size } = await fh.stat();
    const header = Buffer.alloc(headerBytes);
    const { bytesRead } = await fh.read(header, 0, headerBytes, 0);
    const problem = ggufHeaderProblem(header.subarray(0, bytesRead), size);
    if (problem) throw new Error(problem);
  } finally {
    await fh.close();
  }
}

/**
 * The context length the model was trained with (`<architecture>.context_length`), read by
 * @huggingface/gguf, which bounds what a hostile header can cost; undefined when the header has none.
 */
export async function trainedContextLength(path: string): Promise<number | undefined> {
  const { metadata } = await gguf(path, { allowLocalFile: true });
  const architecture = metadata["general.architecture"];
  const length = typeof architecture === "string" ? (metadata as Record<string, unknown>)[`${architecture}.context_length`] : undefined;
  const n = typeof length === "bigint" ? Number(length) : length;
  return typeof n === "number" && Number.isSafeInteger(n) && n > 0 ? n : undefined;
}
