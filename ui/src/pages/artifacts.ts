// Artifacts in the control plane's store: repositories, their commits and files (size, SHA-256, the
// memory a GGUF model is estimated to need); delete a commit for the admin role, confirmed.
import type { StoredArtifactFile } from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { admin, may, methods } from "../api.js";
import { confirmInto, readOnlyNote } from "../confirm.js";
import { h, section, table } from "../dom.js";
import { showError } from "../errors.js";
import { age, bytes } from "../format.js";

/** Files read per call; the page reads on until the store answers its last page. */
const pageSize = 1000;
/** Enough for a page an operator can read; more files are counted, not drawn. */
const maxShownFiles = 5000;

export async function artifactsPage(main: HTMLElement, signal: AbortSignal): Promise<void> {
  const confirmBox = h("div", {});
  const listBox = h("div", {});
  const allowed = may(methods.deleteArtifactFiles);
  main.replaceChildren(h("h1", {}, "Artifacts"), allowed ? "" : readOnlyNote(), confirmBox, listBox);
  const load = async () => {
    const files: StoredArtifactFile[] = [];
    let pageToken = "";
    do {
      const res = await admin.listArtifactFiles({ pageSize, pageToken }, { signal });
      files.push(...res.files);
      pageToken = res.nextPageToken;
    } while (pageToken !== "" && files.length < maxShownFiles);
    const commits = new Map<string, StoredArtifactFile[]>();
    for (const f of files) {
      const key = `${f.repository}@${f.commit}`;
      commits.set(key, [...(commits.get(key) ?? []), f]);
    }
    listBox.replaceChildren(
      commits.size === 0
        ? h("p", {}, "The store holds no artifacts. Push one with: forge artifacts push DIR --repository ORG/NAME --commit HEX")
        : h(
            "div",
            { "data-testid": "artifacts" },
            pageToken !== "" ? h("p", { class: "hint" }, `Showing the first ${files.length} files.`) : "",
            ...[...commits].map(([key, list]) => commitSection(key, list, allowed, () => remove(list[0]!))),
          ),
    );
  };
  const remove = (f: StoredArtifactFile) =>
    confirmInto(confirmBox, `Delete ${f.repository}@${f.commit} from the store? Deployments of it can no longer be placed.`, () =>
      admin.deleteArtifactFiles({ repository: f.repository, commit: f.commit }).then(
        () => load(),
        (err: unknown) => showError(main, err),
      ),
    );
  await load();
}

function commitSection(key: string, files: StoredArtifactFile[], allowed: boolean, remove: () => void): HTMLElement {
  const total = files.reduce((sum, f) => sum + f.sizeBytes, 0n);
  return section(
    key,
    h(
      "p",
      { class: "hint" },
      `${files.length} file${files.length === 1 ? "" : "s"}, ${bytes(total)}, stored ${age(files[0]!.createdAt)} `,
      h("button", { type: "button", class: "small", disabled: !allowed, onclick: remove }, "Delete commit"),
    ),
    table(
      ["Path", "Size", "SHA-256", "Weights", "Context", "Estimated memory"],
      files.map((f) => {
        const m = f.memoryEstimate;
        return [
          f.path,
          bytes(f.sizeBytes),
          h("code", { title: f.sha256 }, `${f.sha256.slice(0, 16)}...`),
          m === undefined ? "-" : bytes(m.weightsBytes),
          m === undefined ? "-" : String(m.contextLength),
          m === undefined ? "-" : bytes(m.estimatedBytes),
        ];
      }),
      `files-${key}`,
    ),
  );
}
