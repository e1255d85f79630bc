// Jobs: list and filter (node, state), and create one from a capability form.
import { JobState, type Node } from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { admin, may, methods } from "../api.js";
import { formValues, h, section, table } from "../dom.js";
import { showError } from "../errors.js";
import { age, enumText } from "../format.js";
import { capabilityFields, specFrom } from "./capability-form.js";

const states = [JobState.PENDING, JobState.LEASED, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED];

export async function jobsPage(main: HTMLElement, signal: AbortSignal, params: URLSearchParams): Promise<void> {
  const nodes = (await admin.listNodes({ pageSize: 1000 }, { signal })).nodes;
  const nodeName = new Map(nodes.map((n) => [n.id, n.name]));
  const nodeOptions = (selected: string) =>
    nodes.map((n) => h("option", { value: n.id, selected: n.id === selected }, `${n.name} (${n.id.slice(0, 8)})`));

  const listBox = h("div", {});
  const filter = h(
    "form",
    {
      class: "inline",
      onsubmit: (e) => {
        e.preventDefault();
        const v = formValues(filter);
        const q = new URLSearchParams();
        if (v.node) q.set("node", v.node);
        if (v.state) q.set("state", v.state);
        location.hash = `#/jobs?${q}`;
      },
    },
    h(
      "label",
      {},
      "Node ",
      h(
        "select",
        { name: "node", "data-testid": "filter-node" },
        h("option", { value: "" }, "any"),
        ...nodeOptions(params.get("node") ?? ""),
      ),
    ),
    h(
      "label",
      {},
      "State ",
      h(
        "select",
        { name: "state", "data-testid": "filter-state" },
        h("option", { value: "" }, "any"),
        ...states.map((s) => h("option", { value: String(s), selected: params.get("state") === String(s) }, enumText(JobState, s))),
      ),
    ),
    h("button", { type: "submit" }, "Filter"),
  );
  main.replaceChildren(
    h("h1", {}, "Jobs"),
    may(methods.createJob) ? createForm(nodes, params.get("node") ?? "", main) : "",
    section("List", filter, listBox),
  );

  const state = Number(params.get("state") ?? "0");
  const jobs = (await admin.listJobs({ nodeId: params.get("node") ?? "", states: state > 0 ? [state] : [], pageSize: 100 }, { signal }))
    .jobs;
  listBox.replaceChildren(
    jobs.length === 0
      ? h("p", {}, "No jobs match.")
      : table(
          ["Job", "Node", "Capability", "State", "Attempt", "Progress", "Created"],
          jobs.map((j) => [
            h("a", { href: `#/jobs/${j.id}` }, j.id.slice(0, 8)),
            nodeName.get(j.nodeId) ?? j.nodeId.slice(0, 8),
            j.capability,
            h("span", { class: `badge ${enumText(JobState, j.state)}` }, enumText(JobState, j.state)),
            `${j.attempt}/${j.maxAttempts}`,
            j.state === JobState.SUCCEEDED ? "100%" : j.progress ? `${j.progress.percent.toFixed(0)}%` : "-",
            age(j.createdAt),
          ]),
          "jobs",
        ),
  );
}

function createForm(nodes: Node[], preselected: string, main: HTMLElement): HTMLElement {
  const fields = h("div", { class: "fields" });
  const nodeSelect = h(
    "select",
    { name: "node", required: true, "data-testid": "job-node" },
    h("option", { value: "" }, "choose a node"),
    ...nodes.map((n) => h("option", { value: n.id, selected: n.id === preselected }, `${n.name} (${n.id.slice(0, 8)})`)),
  );
  const capabilitySelect = h("select", { name: "capability", required: true, "data-testid": "job-capability" });
  const fillCapabilities = () => {
    // Only what the chosen node advertised: the server refuses anything else.
    const caps = nodes.find((n) => n.id === nodeSelect.value)?.capabilities ?? [];
    capabilitySelect.replaceChildren(
      h("option", { value: "" }, caps.length === 0 ? "the node advertises none" : "choose"),
      ...caps.map((c) => h("option", { value: c }, c)),
    );
    fields.replaceChildren();
  };
  nodeSelect.addEventListener("change", fillCapabilities);
  capabilitySelect.addEventListener("change", () =>
    fields.replaceChildren(...(capabilitySelect.value ? capabilityFields(capabilitySelect.value) : [])),
  );
  fillCapabilities();
  const form = h(
    "form",
    {
      "data-testid": "create-job",
      onsubmit: (e) => {
        e.preventDefault();
        const v = formValues(form);
        let spec: ReturnType<typeof specFrom>;
        try {
          spec = specFrom(v.capability ?? "", v);
        } catch (err) {
          showError(main, err);
          return;
        }
        admin.createJob({ nodeId: v.node ?? "", spec, orderingKey: v.orderingKey ?? "" }).then(
          (r) => {
            location.hash = `#/jobs/${r.job!.id}`;
          },
          (err: unknown) => showError(main, err),
        );
      },
    },
    h("label", {}, "Node ", nodeSelect),
    h("label", {}, "Capability ", capabilitySelect),
    fields,
    h("label", {}, "Ordering key ", h("input", { name: "orderingKey", type: "text", placeholder: "optional" })),
    h("button", { type: "submit", "data-testid": "job-submit" }, "Create job"),
  );
  return section("New job", form);
}
