// forge artifacts push | list | delete: the control plane's artifact store, which agents configured
// with the control-plane source download from over their own mTLS connection.
import {
  DeleteArtifactFilesResponseSchema,
  ListArtifactFilesResponseSchema,
  type StoredArtifactFile,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { command, requiredOption, textOption, UsageError, valueOption, type Group } from "../args.js";
import { clean, dateOf, formatBytes, formatTime, table } from "../format.js";
import { printReply } from "../output.js";
import { pagedListCommand } from "../list.js";
import { pushCommand } from "./artifacts-push.js";

/** The stored files table. Pure. */
function fileTable(files: StoredArtifactFile[]): string {
  return table(
    ["REPOSITORY", "COMMIT", "PATH", "SIZE", "EST. MEMORY", "SHA256", "STORED"],
    files.map((f) => [
      clean(f.repository),
      f.commit.slice(0, 12),
      clean(f.path),
      formatBytes(f.sizeBytes),
      // At the model's own context length; placement prices the profile's (docs/serving.md).
      f.memoryEstimate !== undefined ? formatBytes(f.memoryEstimate.estimatedBytes) : "-",
      f.sha256.slice(0, 12),
      formatTime(dateOf(f.createdAt)),
    ]),
  );
}

const listCommand = pagedListCommand("List stored artifact files", {
  options: {
    repository: valueOption("ORG/NAME", "only this repository"),
    commit: valueOption("HEX", "only this commit (with --repository)"),
  },
  filter(values) {
    const name = { repository: textOption(values, "repository"), commit: textOption(values, "commit") };
    if (name.commit !== "" && name.repository === "") throw new UsageError("--commit needs --repository");
    return name;
  },
  schema: ListArtifactFilesResponseSchema,
  fetch: (client, page, name) => client.listArtifactFiles({ ...name, ...page }),
  empty: "No artifact files stored.\n",
  table: fileTable,
});

const deleteCommand = command("delete", "Delete a commit's files (or one file) from the artifact store", {
  options: {
    repository: valueOption("ORG/NAME", "repository (required)"),
    commit: valueOption("HEX", "commit (required)"),
    path: valueOption("PATH", "only this file"),
  },
  async run(ctx, values) {
    const req = {
      repository: requiredOption(values, "repository"),
      commit: requiredOption(values, "commit"),
      path: textOption(values, "path"),
    };
    const res = await ctx.client().deleteArtifactFiles(req);
    return printReply(ctx, DeleteArtifactFilesResponseSchema, res, ({ deletedFiles, freedBytes }) => {
      return `Deleted ${deletedFiles} files of ${req.repository}@${req.commit}; ${formatBytes(freedBytes)} freed.\n`;
    });
  },
});

export const artifactsGroup: Group = {
  name: "artifacts",
  summary: "The control plane's artifact store",
  topic: "the artifact store",
  commands: [pushCommand, listCommand, deleteCommand],
};
