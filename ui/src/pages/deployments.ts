// Deployments: the list (state, revision, replicas ready of wanted, requests and failures over the
// last five minutes from the usage aggregates), polled; and a create form for the admin role.
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  DeploymentDesiredState,
  type DeploymentRecord,
  UsageGrouping,
  type UsageRow,
} from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { DeploymentState } from "../../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { admin, may, methods, pause } from "../api.js";
import { readOnlyNote } from "../confirm.js";
import { formValues, h, morph, section, table } from "../dom.js";
import { showError } from "../errors.js";
import { age, enumText, parseLabels } from "../format.js";

const pollMs = 2_000;
/** The window the list's request figures cover. */
const rateWindowMs = 5 * 60_000;

export function deploymentStateText(s: DeploymentState): string {
  return enumText(DeploymentState, s);
}

export function stateBadge(s: DeploymentState, testId: string): HTMLElement {
  const text = deploymentStateText(s);
  return h("span", { class: `badge dep-${text}`, "data-testid": testId }, text);
}

export async function deploymentsPage(main: HTMLElement, signal: AbortSignal): Promise<void> {
  const listBox = h("div", {});
  main.replaceChildren(
    h("h1", {}, "Deployments"),
    section("Deployments", listBox),
    may(methods.createDeployment) ? await createForm(main, signal) : readOnlyNote(),
  );
  while (!signal.aborted) {
    const [list, usage] = await Promise.all([
      admin.listDeploymentRecords({ pageSize: 1000 }, { signal }),
      admin.getUsage({ since: timestampFromMs(Date.now() - rateWindowMs), by: UsageGrouping.DEPLOYMENT }, { signal }),
    ]);
    morph(listBox, [render(list.deployments, usage.rows)]);
    await pause(pollMs, signal);
  }
}

function render(all: DeploymentRecord[], usage: UsageRow[]): HTMLElement {
  if (all.length === 0) return h("p", {}, "No deployments yet.");
  const byId = new Map(usage.map((r) => [r.deploymentId, r]));
  return table(
    ["Name", "State", "Desired", "Revision", "Ready", "Requests/min (5m)", "Failed (5m)", "Profile", "Updated"],
    all.map((r) => {
      const d = r.deployment!;
      const u = byId.get(d.id);
      return [
        h("a", { href: `#/deployments/${encodeURIComponent(d.name)}` }, d.name),
        stateBadge(d.state, `state-${d.name}`),
        enumText(DeploymentDesiredState, r.desired),
        String(d.revision),
        h("span", { "data-testid": `ready-${d.name}` }, `${r.readyReplicas}/${r.desiredReplicas}`),
        u === undefined ? "0" : (Number(u.requests) / (rateWindowMs / 60_000)).toFixed(1),
        u === undefined ? "0" : String(u.failedRequests),
        r.runtimeProfile,
        age(d.updatedAt),
      ];
    }),
    "deployments",
  );
}

/** The create form, its choices (profiles, stored commits, nodes) read once when the page opens. */
async function createForm(main: HTMLElement, signal: AbortSignal): Promise<HTMLElement> {
  const [profiles, files, nodes] = await Promise.all([
    admin.listRuntimeProfiles({ pageSize: 1000 }, { signal }),
    admin.listArtifactFiles({ pageSize: 1000 }, { signal }),
    admin.listNodes({ pageSize: 1000 }, { signal }),
  ]);
  const commits = [...new Set(files.files.map((f) => `${f.repository}@${f.commit}`))];
  const form = h(
    "form",
    {
      "data-testid": "create-deployment",
      onsubmit: (e) => {
        e.preventDefault();
        const v = formValues(form);
        const [repository = "", commit = ""] = (v.artifact ?? "").split("@");
        let request: Parameters<typeof admin.createDeployment>[0];
        try {
          const replicas = Number(v.replicas ?? "1");
          if (!Number.isInteger(replicas) || replicas < 0 || replicas > 64) throw new Error("replicas: a whole number from 0 to 64");
          request = {
            name: v.name ?? "",
            runtimeProfile: v.profile ?? "",
            repository,
            commit,
            modelFile: v.modelFile ?? "",
            nodeId: v.node ?? "",
            selector: parseLabels(v.selector ?? ""),
            replicas,
          };
        } catch (err) {
          return showError(main, err);
        }
        admin.createDeployment(request).then(
          (r) => {
            location.hash = `#/deployments/${encodeURIComponent(r.deployment!.deployment!.name)}`;
          },
          (err: unknown) => showError(main, err),
        );
      },
    },
    h("label", {}, "Name ", h("input", { name: "name", required: true, pattern: "[a-z][a-z0-9-]{0,62}", "data-testid": "dep-name" })),
    h(
      "label",
      {},
      "Runtime profile ",
      h(
        "select",
        { name: "profile", required: true, "data-testid": "dep-profile" },
        ...profiles.profiles.map((p) => h("option", { value: p.name }, p.name)),
      ),
    ),
    h(
      "label",
      {},
      "Artifact ",
      h("select", { name: "artifact", required: true, "data-testid": "dep-artifact" }, ...commits.map((c) => h("option", { value: c }, c))),
    ),
    h("label", {}, "Model file ", h("input", { name: "modelFile", placeholder: "its single .gguf", "data-testid": "dep-model-file" })),
    h(
      "label",
      {},
      "Node ",
      h(
        "select",
        { name: "node", "data-testid": "dep-node" },
        h("option", { value: "" }, "placed by selector"),
        ...nodes.nodes.map((n) => h("option", { value: n.id }, `${n.name || n.id} (${n.id.slice(0, 8)})`)),
      ),
    ),
    h("label", {}, "Selector ", h("input", { name: "selector", placeholder: "zone=a", "data-testid": "dep-selector" })),
    h("label", {}, "Replicas ", h("input", { name: "replicas", type: "number", min: 0, max: 64, value: 1, "data-testid": "dep-replicas" })),
    h("button", { type: "submit", "data-testid": "dep-submit" }, "Create deployment"),
  );
  return section(
    "New deployment",
    profiles.profiles.length === 0 || commits.length === 0
      ? h(
          "p",
          { class: "hint" },
          "Needs a runtime profile (see ",
          h("a", { href: "#/runtimes" }, "Runtime profiles"),
          ") and a pushed artifact (forge artifacts push).",
        )
      : "",
    form,
  );
}
