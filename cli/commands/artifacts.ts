// forge artifacts push | list | delete: the control plane's artifact store, which agents configured
// with the control-plane source download from over their own mTLS connection.
import { createHash } from "node:crypto";
import { lstat, open, readdir } from "node:fs/promises";
import { join, relative, sep } from "node:path";
import {
  DeleteArtifactFilesResponseSchema,
  ListArtifactFilesResponseSchema,
  StoredArtifactFileSchema,
  type StoredArtifactFile,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { textOption, UsageError, type Command, type Context, type Group, type OptionValues } from "../args.js";
import { clean, dateOf, formatBytes, formatTime, table } from "../format.js";
import { printJson, printJsonLine } from "../output.js";

/** Bytes per UploadArtifactChunk call: at the server's 1 MiB bound, under every message limit. */
const CHUNK_BYTES = 1024 * 1024;

interface LocalFile {
  path: string;
  absolute: string;
  size: number;
  sha256: string;
}

function requiredOption(values: OptionValues, name: string): string {
  const value = textOption(values, name);
  if (value === "") throw new UsageError(`--${name} is required`);
  return value;
}

/** Every regular file under `dir`, by "/"-separated relative path; symlinks are refused, .git skipped. */
async function collectFiles(dir: string): Promise<{ files: Omit<LocalFile, "sha256">[]; skipped: string[] }> {
  const root = await lstat(dir).catch(() => undefined);
  if (root === undefined || !root.isDirectory()) throw new UsageError(`${dir} is not a directory`);
  const files: Omit<LocalFile, "sha256">[] = [];
  const skipped: string[] = [];
  const walk = async (at: string): Promise<void> => {
    for (const entry of (await readdir(at, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
      const absolute = join(at, entry.name);
      const path = relative(dir, absolute).split(sep).join("/");
      if (entry.isSymbolicLink()) throw new UsageError(`${path} is a symlink; push real files only`);
      if (entry.isDirectory()) {
        if (entry.name === ".git") skipped.push(path);
        else await walk(absolute);
      } else if (entry.isFile()) {
        files.push({ path, absolute, size: (await lstat(absolute)).size });
      } else skipped.push(path);
    }
  };
  await walk(dir);
  return { files, skipped };
}

async function sha256Of(path: string): Promise<string> {
  const fh = await open(path, "r");
  try {
    const hash = createHash("sha256");
    for await (const chunk of fh.createReadStream({ autoClose: false, highWaterMark: CHUNK_BYTES })) hash.update(chunk as Buffer);
    return hash.digest("hex");
  } finally {
    await fh.close();
  }
}

/** Pushes one file, resuming from whatever the store already holds of it. */
async function pushFile(
  ctx: Context,
  name: { repository: string; commit: string },
  file: LocalFile,
): Promise<{ file: StoredArtifactFile | undefined; sent: number }> {
  const client = ctx.client();
  const base = { ...name, path: file.path, sizeBytes: BigInt(file.size), sha256: file.sha256 };
  let reply = await client.uploadArtifactChunk({ ...base, offset: 0n }, { signal: ctx.signal });
  let offset = Number(reply.receivedBytes);
  let sent = 0;
  const fh = await open(file.absolute, "r");
  try {
    const buffer = Buffer.alloc(CHUNK_BYTES);
    while (!reply.complete) {
      const { bytesRead } = await fh.read(buffer, 0, Math.min(CHUNK_BYTES, file.size - offset), offset);
      if (bytesRead === 0) throw new UsageError(`${file.path} changed while it was being pushed`);
      reply = await client.uploadArtifactChunk(
        { ...base, offset: BigInt(offset), data: buffer.subarray(0, bytesRead) },
        { signal: ctx.signal },
      );
      offset = Number(reply.receivedBytes);
      sent += bytesRead;
    }
  } finally {
    await fh.close();
  }
  return { file: reply.file, sent };
}

const pushCommand: Command = {
  name: "push",
  summary: "Push a directory's files into the artifact store as one commit",
  args: "DIR",
  positionals: { min: 1, max: 1 },
  options: {
    repository: { type: "string", value: "ORG/NAME", description: "repository the files belong to (required)" },
    commit: { type: "string", value: "HEX", description: "the exact 40-hex commit (required)" },
  },
  notes: "Files already stored (same digest) are not sent again; an interrupted push resumes where it stopped.\n",
  interruptible: true,
  async run(ctx, values, positionals) {
    const name = { repository: requiredOption(values, "repository"), commit: requiredOption(values, "commit") };
    const { files, skipped } = await collectFiles(positionals[0]!);
    if (files.length === 0) throw new UsageError(`${positionals[0]} holds no files`);
    for (const path of skipped) ctx.err(`skipped ${clean(path)} (${path.endsWith(".git") ? "git metadata" : "not a regular file"})\n`);
    let total = 0;
    for (const f of files) {
      const local = { ...f, sha256: await sha256Of(f.absolute) };
      const { file, sent } = await pushFile(ctx, name, local);
      total += sent;
      if (ctx.json) {
        if (file !== undefined) printJsonLine(ctx, StoredArtifactFileSchema, file);
      } else ctx.out(`${sent > 0 ? "pushed " : "present"} ${clean(f.path)}  ${formatBytes(f.size)}  sha256:${local.sha256}\n`);
    }
    if (!ctx.json) ctx.out(`${files.length} files stored for ${name.repository}@${name.commit} (${formatBytes(total)} sent).\n`);
    return 0;
  },
};

const listCommand: Command = {
  name: "list",
  summary: "List stored artifact files",
  options: {
    repository: { type: "string", value: "ORG/NAME", description: "only this repository" },
    commit: { type: "string", value: "HEX", description: "only this commit (with --repository)" },
  },
  async run(ctx, values) {
    const repository = textOption(values, "repository");
    const commit = textOption(values, "commit");
    if (commit !== "" && repository === "") throw new UsageError("--commit needs --repository");
    const files: StoredArtifactFile[] = [];
    let pageToken = "";
    do {
      const res = await ctx.client().listArtifactFiles({ repository, commit, pageToken, pageSize: 1000 });
      files.push(...res.files);
      pageToken = res.nextPageToken;
    } while (pageToken !== "");
    if (ctx.json) {
      printJson(ctx, ListArtifactFilesResponseSchema, {
        $typeName: "modelforge.admin.v1.ListArtifactFilesResponse",
        files,
        nextPageToken: "",
      });
      return 0;
    }
    if (files.length === 0) {
      ctx.out("No artifact files stored.\n");
      return 0;
    }
    ctx.out(
      table(
        ["REPOSITORY", "COMMIT", "PATH", "SIZE", "SHA256", "STORED"],
        files.map((f) => [
          clean(f.repository),
          f.commit.slice(0, 12),
          clean(f.path),
          formatBytes(f.sizeBytes),
          f.sha256.slice(0, 12),
          formatTime(dateOf(f.createdAt)),
        ]),
      ),
    );
    return 0;
  },
};

const deleteCommand: Command = {
  name: "delete",
  summary: "Delete a commit's files (or one file) from the artifact store",
  options: {
    repository: { type: "string", value: "ORG/NAME", description: "repository (required)" },
    commit: { type: "string", value: "HEX", description: "commit (required)" },
    path: { type: "string", value: "PATH", description: "only this file" },
  },
  async run(ctx, values) {
    const req = {
      repository: requiredOption(values, "repository"),
      commit: requiredOption(values, "commit"),
      path: textOption(values, "path"),
    };
    const res = await ctx.client().deleteArtifactFiles(req);
    if (ctx.json) printJson(ctx, DeleteArtifactFilesResponseSchema, res);
    else ctx.out(`Deleted ${res.deletedFiles} files of ${req.repository}@${req.commit}; ${formatBytes(res.freedBytes)} freed.\n`);
    return 0;
  },
};

export const artifactsGroup: Group = {
  name: "artifacts",
  summary: "The control plane's artifact store",
  topic: "the artifact store",
  commands: [pushCommand, listCommand, deleteCommand],
};
