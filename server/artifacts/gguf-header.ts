// Reads a stored file's GGUF header with @huggingface/gguf (MIT, Node >= 20, reads local files
// offline). The parser bounds itself: it reads 2 MB chunks into a buffer capped at 50 MB and caps
// counts, lengths and nesting, so a hostile header costs at most that.
import { gguf } from "@huggingface/gguf";
import { estimateGguf, type MemoryEstimate } from "./memory.js";

/** The file's memory estimate, or undefined when it is not a GGUF the estimate understands. */
export async function estimateFile(localPath: string): Promise<MemoryEstimate | undefined> {
  try {
    const { metadata, tensorInfos } = await gguf(localPath, { allowLocalFile: true });
    const architecture = metadata["general.architecture"];
    return estimateGguf({
      architecture: typeof architecture === "string" ? architecture : undefined,
      metadata: Object.fromEntries(Object.entries(metadata)) as { [key: string]: unknown },
      tensors: tensorInfos,
    });
  } catch {
    // Not a GGUF, or one this estimate cannot price: placement then says the need is unknown.
    return undefined;
  }
}
