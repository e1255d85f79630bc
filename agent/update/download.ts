// Downloads a release over the node's mTLS connection into the state directory, resuming from
// whatever an earlier attempt left, and hashes what it holds.
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, open, stat, truncate } from "node:fs/promises";
import { join } from "node:path";
import type { AgentUpdateInstruction } from "../../gen/proto/modelforge/agent/v1/agent_update_pb.js";
import type { AgentClient } from "../session/transport.js";

/** A release bigger than this is refused before a byte is fetched (the control plane's own bound). */
export const MAX_RELEASE_BYTES = 512 * 1024 * 1024;

export interface Downloaded {
  path: string;
  sha256: string;
  sizeBytes: number;
}

export async function downloadRelease(
  client: AgentClient,
  want: AgentUpdateInstruction,
  dir: string,
  signal: AbortSignal,
): Promise<Downloaded> {
  const size = Number(want.sizeBytes);
  if (!/^[0-9a-f]{64}$/.test(want.sha256) || size <= 0 || size > MAX_RELEASE_BYTES) {
    throw new Error(`refused: the instruction names no valid release (sha256 ${want.sha256.slice(0, 64)}, ${size} bytes)`);
  }
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const path = join(dir, `${want.sha256}.part`);
  let offset = (await stat(path).catch(() => undefined))?.size ?? 0;
  // More than the release holds cannot be a prefix of it: start over.
  if (offset > size) {
    await truncate(path, 0);
    offset = 0;
  }
  if (offset < size) {
    const fh = await open(path, "a", 0o600);
    try {
      const request = { version: want.version, platform: want.platform, offset: BigInt(offset) };
      for await (const res of client.downloadAgentRelease(request, { signal })) {
        if (offset + res.data.byteLength > size) throw new Error(`refused: the server sent more than the release's ${size} bytes`);
        await fh.write(res.data);
        offset += res.data.byteLength;
      }
      await fh.sync();
    } finally {
      await fh.close();
    }
  }
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return { path, sha256: hash.digest("hex"), sizeBytes: (await stat(path)).size };
}
