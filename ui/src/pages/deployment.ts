// One deployment: facts, replicas (each with its node, linked), revisions, state history, requests
// and time to first token over the last hour (usage aggregates by minute), audit events, and the
// runtime's output live through WatchDeploymentLogs. Admin actions (scale, new revision, start,
// drain, unload, delete) are each confirmed in the page; the read-only role sees them disabled,
// with a note.
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  DeploymentDesiredState,
  type DeploymentAutoscaling,
  type GetDeploymentResponse,
  UsageGrouping,
  type UsageRow,
} from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { LogStream } from "../../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import { admin, describeError, may, methods, pause } from "../api.js";
import { lineChart } from "../chart.js";
import { confirmInto, readOnlyNote } from "../confirm.js";
import { formValues, h, morph, section, table } from "../dom.js";
import { showError } from "../errors.js";
import { age, enumText, gpusText, labels, time } from "../format.js";
import { bucketSeries, tokensOf, ttftMs } from "../usage.js";
import { deploymentStateText, stateBadge } from "./deployments.js";

const pollMs = 1_500;
/** Usage is aggregated per minute and written every few seconds: no need to ask more often. */
const usagePollMs = 10_000;
const hourMs = 3_600_000;
const minuteMs = 60_000;
/** Log lines kept on the page; older ones are dropped from the top. */
const keptLogLines = 500;

export function deploymentPage(name: string) {
  return async (main: HTMLElement, signal: AbortSignal): Promise<void> => {
    const body = h("div", {});
    const charts = h("div", { class: "charts" });
    const logs = h("pre", { class: "logs", "data-testid": "logs" });
    const logNote = h("p", { class: "hint", "data-testid": "logs-note" }, "Connecting...");
    const audit = h("div", {});
    const first = await admin.getDeployment({ deployment: name }, { signal });
    const id = first.deployment!.deployment!.id;
    main.replaceChildren(
      h("h1", {}, "Deployment ", h("span", { "data-testid": "dep-title" }, first.deployment!.deployment!.name)),
      actions(main, first.deployment!.deployment!.name, first.deployment!.desiredReplicas),
      body,
      section("Last hour", charts),
      section("Runtime output", logNote, logs),
      section("Audit", audit),
    );
    void followLogs(id, logs, logNote, signal);
    void pollUsage(id, charts, signal);
    void loadAudit(id, audit, signal);
    const nodeNames = new Map<string, string>();
    let res: GetDeploymentResponse = first;
    while (!signal.aborted) {
      // A node not seen before: read the names again (few calls, since replicas rarely move).
      if (res.deployment!.replicas.some((r) => r.nodeId !== "" && !nodeNames.has(r.nodeId))) {
        for (const n of (await admin.listNodes({ pageSize: 1000 }, { signal })).nodes) nodeNames.set(n.id, n.name);
      }
      morph(body, render(res, nodeNames));
      await pause(pollMs, signal);
      if (signal.aborted) return;
      res = await admin.getDeployment({ deployment: id }, { signal });
    }
  };
}

function nodeLink(nodeId: string, names: Map<string, string>): Node | string {
  return nodeId === "" ? "-" : h("a", { href: `#/nodes/${nodeId}` }, names.get(nodeId) || nodeId.slice(0, 8));
}

function render(res: GetDeploymentResponse, names: Map<string, string>): HTMLElement[] {
  const r = res.deployment!;
  const d = r.deployment!;
  const facts: [string, Node | string][] = [
    ["ID", d.id],
    ["State", stateBadge(d.state, "dep-state")],
    ["Desired", enumText(DeploymentDesiredState, r.desired)],
    ["Ready replicas", h("span", { "data-testid": "dep-ready" }, `${r.readyReplicas}/${r.desiredReplicas}`)],
    ["Revision", h("span", { "data-testid": "dep-revision" }, String(d.revision))],
    ["Runtime profile", r.runtimeProfile],
    ["Artifact", `${r.repository}@${r.commit}`],
    ["Model file", r.modelFile || "the commit's single .gguf"],
    ["Selector", labels(r.selector)],
    ["Max in flight", String(r.maxInFlight)],
    ["Autoscaling", h("span", { "data-testid": "dep-autoscaling" }, autoscalingText(r.autoscaling))],
    ["Failure", d.failureReason || "-"],
    ["Updated", `${age(d.updatedAt)} (${time(d.updatedAt)})`],
  ];
  return [
    h("dl", { class: "facts" }, ...facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    section(
      `Replicas (${r.replicas.length})`,
      table(
        ["Slot", "Revision", "Node", "GPUs", "State", "In flight", "Restarts", "Reason"],
        r.replicas.map((p) => [
          String(p.index),
          String(p.revision),
          nodeLink(p.nodeId, names),
          gpusText(p.gpus),
          stateBadge(p.state, `replica-state-${p.index}-${p.revision}`),
          String(p.inFlight),
          String(p.restarts),
          p.reason || "-",
        ]),
        "replicas",
      ),
    ),
    section(
      "Revisions",
      table(
        ["Revision", "Slot", "Node", "State", "Step", "Profile", "Commit", "Model file", "Updated", "Reason"],
        r.instances.map((i) => [
          String(i.revision),
          String(i.replica),
          nodeLink(i.nodeId, names),
          deploymentStateText(i.state),
          i.step || "-",
          i.runtimeProfile,
          i.commit.slice(0, 12),
          i.modelFile || "-",
          age(i.updatedAt),
          i.reason || "-",
        ]),
        "revisions",
      ),
    ),
    section(
      "Scaling",
      table(
        ["Time", "From", "To", "By", "Reason"],
        [...res.scalingEvents].reverse().map((e) => [time(e.time), String(e.fromReplicas), String(e.toReplicas), e.actor, e.reason || "-"]),
        "scaling",
      ),
    ),
    section(
      "State history",
      table(
        ["Time", "Revision", "Slot", "Node", "From", "To", "Reason"],
        [...res.events]
          .reverse()
          .map((e) => [
            time(e.time),
            String(e.revision),
            String(e.replica),
            nodeLink(e.nodeId, names),
            e.fromState === 0 ? "-" : deploymentStateText(e.fromState),
            deploymentStateText(e.toState),
            e.reason || "-",
          ]),
        "history",
      ),
    ),
  ];
}

/** A duration of the contract in the fewest words: "30s", "10m", "2h". */
function span(d: { seconds: bigint } | undefined): string {
  const s = Number(d?.seconds ?? 0n);
  return s < 120 ? `${s}s` : s < 7200 ? `${Math.round(s / 60)}m` : `${Math.round(s / 3600)}h`;
}

/** The autoscaling settings in one line, or that the operator fixed the count. */
function autoscalingText(a: DeploymentAutoscaling | undefined): string {
  if (a === undefined) return "off: a fixed count";
  const zero = a.minReplicas === 0 ? `, to zero after ${span(a.scaleToZeroAfter)} idle` : "";
  return `${a.minReplicas} to ${a.maxReplicas} replicas, target ${a.targetInFlight} in flight each${zero}; up after ${span(a.upscaleDelay)}, down after ${span(a.downscaleDelay)}; priority ${a.priority}`;
}

/** Scale, start, drain, unload, delete: each asks first; disabled, with a note, for the read-only role. */
function actions(main: HTMLElement, name: string, replicas: number): HTMLElement {
  const box = h("div", {});
  const allowed = may(methods.scaleDeployment);
  const done = (what: string) => (p: Promise<unknown>) =>
    p.then(
      () => {
        box.replaceChildren(h("p", { class: "hint", role: "status", "data-testid": "action-done" }, what));
        if (what.startsWith("Deleted")) location.hash = "#/deployments";
      },
      (err: unknown) => showError(main, err),
    );
  const scaleInput = h("input", { type: "number", min: 0, max: 64, value: replicas, disabled: !allowed, "data-testid": "scale-replicas" });
  const button = (label: string, testId: string, onclick: () => void) =>
    h("button", { type: "button", disabled: !allowed, "data-testid": testId, onclick }, label);
  const simple = (verb: string, past: string, call: (r: { deployment: string }) => Promise<unknown>, testId: string, warning = "") =>
    button(verb, testId, () => confirmInto(box, `${verb} ${name}?${warning}`, () => done(`${past} ${name}.`)(call({ deployment: name }))));
  return h(
    "div",
    {},
    h(
      "div",
      { class: "controls", "data-testid": "dep-actions" },
      h("label", { class: "inline" }, "Replicas ", scaleInput),
      button("Scale", "action-scale", () => {
        const n = Number(scaleInput.value);
        if (!Number.isInteger(n) || n < 0 || n > 64) return showError(main, new Error("replicas: a whole number from 0 to 64"));
        confirmInto(box, `Scale ${name} to ${n} replica${n === 1 ? "" : "s"}?`, () =>
          done(`Scaled ${name} to ${n}.`)(admin.scaleDeployment({ deployment: name, replicas: n })),
        );
      }),
      simple("Start", "Started", (r) => admin.startDeployment(r), "action-start"),
      simple("Drain", "Draining", (r) => admin.drainDeployment(r), "action-drain", " New invokes stop now; in-flight ones finish."),
      simple("Unload", "Unloading", (r) => admin.unloadDeployment(r), "action-unload", " In-flight invokes are cut off."),
      simple("Delete", "Deleted", (r) => admin.deleteDeployment(r), "action-delete", " It is unloaded and its record removed."),
    ),
    revisionForm(allowed, (change) => {
      const what = Object.entries(change)
        .filter(([, v]) => v !== "")
        .map(([k, v]) => `${k} ${v}`)
        .join(", ");
      confirmInto(box, `Move ${name} to a new revision (${what || "the same content"})? It loads before the old one drains.`, () =>
        done(`Moving ${name} to a new revision.`)(
          admin.updateDeploymentRevision({
            deployment: name,
            runtimeProfile: change.profile,
            commit: change.commit,
            modelFile: change["model file"],
          }),
        ),
      );
    }),
    allowed ? "" : readOnlyNote(),
    box,
  );
}

/** Another commit, profile and/or model file; each left empty keeps the current one. */
function revisionForm(allowed: boolean, ask: (change: { profile: string; commit: string; "model file": string }) => void): HTMLElement {
  const field = (name: string, label: string) =>
    h(
      "label",
      { class: "inline" },
      label,
      " ",
      h("input", { name, placeholder: "keep", disabled: !allowed, "data-testid": `revision-${name}` }),
    );
  const form: HTMLFormElement = h(
    "form",
    {
      class: "controls",
      "data-testid": "revision-form",
      onsubmit: (e) => {
        e.preventDefault();
        const v = formValues(form);
        ask({ profile: (v.profile ?? "").trim(), commit: (v.commit ?? "").trim(), "model file": (v.modelFile ?? "").trim() });
      },
    },
    field("profile", "Profile"),
    field("commit", "Commit"),
    field("modelFile", "Model file"),
    h("button", { type: "submit", disabled: !allowed, "data-testid": "action-revision" }, "New revision"),
  );
  return form;
}

/** The runtime's output, live; the watch is opened again after it ends (no node yet, a node reconnecting). */
async function followLogs(deployment: string, out: HTMLElement, note: HTMLElement, signal: AbortSignal): Promise<void> {
  while (!signal.aborted) {
    try {
      note.textContent = out.childNodes.length === 0 ? "Following; nothing written yet." : "Following.";
      for await (const batch of admin.watchDeploymentLogs({ deploymentId: deployment, tailLines: 100 }, { signal, timeoutMs: 0 })) {
        if (batch.lines.length > 0 && batch.droppedLines === 0n) note.textContent = "Following.";
        for (const line of batch.lines) {
          const stream = line.stream === LogStream.STDERR ? "err" : "out";
          out.append(h("span", { class: `log-${stream}` }, `${time(line.observedAt)} ${stream} r${line.revision} ${line.text}\n`));
        }
        while (out.childNodes.length > keptLogLines) out.firstChild!.remove();
        if (batch.droppedLines > 0n) note.textContent = `Following; ${batch.droppedLines} lines dropped by the node's rate limit.`;
        out.scrollTop = out.scrollHeight;
      }
    } catch (err) {
      if (signal.aborted) return;
      note.textContent = `Not following: ${describeError(err)}. Trying again in a few seconds.`;
    }
    await pause(3_000, signal);
  }
}

async function pollUsage(deployment: string, box: HTMLElement, signal: AbortSignal): Promise<void> {
  while (!signal.aborted) {
    const now = Date.now();
    try {
      const rows = (await admin.getUsage({ deployment, since: timestampFromMs(now - hourMs), by: UsageGrouping.MINUTE }, { signal })).rows;
      morph(box, usageCharts(rows, now));
    } catch (err) {
      if (signal.aborted) return;
      box.replaceChildren(h("p", { class: "hint" }, `Usage could not be loaded: ${describeError(err)}`));
    }
    await pause(usagePollMs, signal);
  }
}

function usageCharts(rows: UsageRow[], now: number): HTMLElement[] {
  const series = (pick: (r: UsageRow) => number) => bucketSeries(rows, now - hourMs, now, minuteMs, pick);
  const requests = series((r) => Number(r.requests));
  const failed = series((r) => Number(r.failedRequests));
  const tokens = series((r) => tokensOf(r) / 60);
  const ttft = series(ttftMs);
  const max = (v: number[]) => Math.max(1, ...v);
  return [
    lineChart(
      "Requests per minute",
      [
        { name: "all", values: requests },
        { name: "failed", values: failed },
      ],
      max(requests),
      "",
      "chart-requests",
    ),
    lineChart("Tokens per second", [{ name: "tokens", values: tokens }], max(tokens), "/s", "chart-tokens", 1),
    lineChart("Time to first token", [{ name: "mean", values: ttft }], max(ttft), " ms", "chart-ttft"),
  ];
}

async function loadAudit(targetId: string, box: HTMLElement, signal: AbortSignal): Promise<void> {
  try {
    const events = (await admin.listAuditEvents({ targetId, pageSize: 50 }, { signal })).events;
    box.replaceChildren(
      table(
        ["Time", "Actor", "Action", "Details"],
        events.map((e) => [time(e.time), e.actor, e.action, labels(e.details)]),
        "dep-audit",
      ),
    );
  } catch {
    if (!signal.aborted) box.replaceChildren("Audit events could not be loaded.");
  }
}
