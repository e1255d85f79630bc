// forge agents releases push FILE --version V | list: a single-file agent into the artifact
// store, then recorded as a release (with its Ed25519 signature, when releases are signed).
import { createHash } from "node:crypto";
import { open, readFile, stat } from "node:fs/promises";
import {
  CreateAgentReleaseResponseSchema,
  ListAgentReleasesResponseSchema,
  type AgentRelease,
} from "../../gen/proto/modelforge/admin/v1/agent_upgrades_pb.js";
import { command, requiredOption, textOption, UsageError, valueOption, type Context } from "../args.js";
import { clean, dateOf, formatBytes, formatTime, table } from "../format.js";
import { printList, printReply } from "../output.js";
import { currentPlatform, releaseArtifact } from "../../common/agent-releases.js";

const CHUNK_BYTES = 1024 * 1024;

async function digestOf(path: string): Promise<{ sha256: string; size: number }> {
  const st = await stat(path).catch(() => undefined);
  if (st === undefined || !st.isFile()) throw new UsageError(`${path} is not a file`);
  const fh = await open(path, "r");
  try {
    const hash = createHash("sha256");
    for await (const chunk of fh.createReadStream({ autoClose: false, highWaterMark: CHUNK_BYTES })) hash.update(chunk as Buffer);
    return { sha256: hash.digest("hex"), size: st.size };
  } finally {
    await fh.close();
  }
}

/** Sends the file in chunks from wherever the store's copy stands (an interrupted push resumes). */
async function upload(ctx: Context, path: string, name: ReturnType<typeof releaseArtifact>, file: { sha256: string; size: number }) {
  const client = ctx.client();
  const base = { ...name, sha256: file.sha256, sizeBytes: BigInt(file.size) };
  let reply = await client.uploadArtifactChunk({ ...base, offset: 0n }, { signal: ctx.signal });
  const fh = await open(path, "r");
  try {
    const buffer = Buffer.alloc(Math.min(CHUNK_BYTES, file.size));
    while (!reply.complete) {
      const offset = Number(reply.receivedBytes);
      const { bytesRead } = await fh.read(buffer, 0, Math.min(buffer.length, file.size - offset), offset);
      if (bytesRead === 0) throw new UsageError(`${path} changed while it was being pushed`);
      const data = buffer.subarray(0, bytesRead);
      reply = await client.uploadArtifactChunk({ ...base, offset: BigInt(offset), data }, { signal: ctx.signal });
    }
  } finally {
    await fh.close();
  }
}

const pushVerb = command("push FILE", "Push a single-file agent and record it as a release", {
  options: {
    version: valueOption("VERSION", "the version the file reports with --version (required)"),
    platform: valueOption("OS-ARCH", `the platform it runs on (default ${currentPlatform()})`),
    signature: valueOption("FILE", "its Ed25519 detached signature (64 bytes), when releases are signed"),
  },
  async run(ctx, values, positionals) {
    const path = positionals[0]!;
    const version = requiredOption(values, "version");
    const platform = textOption(values, "platform") || currentPlatform();
    const sigPath = textOption(values, "signature");
    const signature =
      sigPath === ""
        ? new Uint8Array()
        : await readFile(sigPath).catch(() => {
            throw new UsageError(`cannot read --signature ${sigPath}`);
          });
    const file = await digestOf(path);
    await upload(ctx, path, releaseArtifact(file.sha256, { version, platform }), file);
    const res = await ctx.client().createAgentRelease({ version, platform, sha256: file.sha256, sizeBytes: BigInt(file.size), signature });
    return printReply(
      ctx,
      CreateAgentReleaseResponseSchema,
      res,
      ({ created }) =>
        `${created ? "Recorded" : "Already recorded:"} release ${clean(version)} (${clean(platform)}), ${formatBytes(file.size)}, sha256:${file.sha256}${signature.byteLength > 0 ? ", signed" : ""}.\n`,
    );
  },
});

function releaseTable(releases: AgentRelease[]): string {
  return table(
    ["VERSION", "PLATFORM", "SIZE", "SHA256", "SIGNED", "RECORDED"],
    releases.map((r) => [
      clean(r.version),
      clean(r.platform),
      formatBytes(r.sizeBytes),
      r.sha256.slice(0, 12),
      r.signed ? "yes" : "no",
      formatTime(dateOf(r.createdAt)),
    ]),
  );
}

const listVerb = command("list", "List agent releases, newest first", {
  async run(ctx) {
    const res = await ctx.client().listAgentReleases({});
    printList(ctx, ListAgentReleasesResponseSchema, res, { items: res.releases, empty: "No agent releases.\n", table: releaseTable });
    return 0;
  },
});

export const releasesVerbs = [pushVerb, listVerb];
