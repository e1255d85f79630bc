// Fleet overview: counts by liveness, GPUs, the nodes, recent transitions; live via WatchNodes.
import type { AuditEvent, Node } from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { AgentRollout } from "../../../gen/proto/modelforge/admin/v1/agent_upgrades_pb.js";
import { activeRollout, agentText, rolloutLine } from "../agent-version.js";
import { Liveness } from "../../../gen/proto/modelforge/common/v1/common_pb.js";
import { admin } from "../api.js";
import { h, morph, section, table } from "../dom.js";
import { age, labels, livenessName, time } from "../format.js";

const shown = [Liveness.ONLINE, Liveness.STALE, Liveness.OFFLINE, Liveness.PENDING, Liveness.DISABLED, Liveness.DECOMMISSIONED];
const transitionActions = new Set([
  "node.online",
  "node.stale",
  "node.offline",
  "node.enrolled",
  "node.registered",
  "node.disabled",
  "node.enabled",
  "node.decommissioned",
]);

export async function fleetPage(main: HTMLElement, signal: AbortSignal): Promise<void> {
  const nodes = new Map<string, Node>();
  const counts = h("div", { class: "counts", "data-testid": "counts" });
  const list = h("div", {});
  const transitions = h("div", {});
  const progress = h("p", { "data-testid": "rollout" });
  main.replaceChildren(h("h1", {}, "Fleet"), counts, section("Nodes", progress, list), section("Recent transitions", transitions));

  let recent: AuditEvent[] = [];
  let rollout: AgentRollout | undefined;
  const render = () => {
    const all = [...nodes.values()].sort((a, b) => a.name.localeCompare(b.name) || a.id.localeCompare(b.id));
    const tile = (label: string, value: number, testId: string) =>
      h("div", { class: "tile", "data-testid": testId }, h("span", { class: "value" }, value), h("span", {}, label));
    morph(counts, [
      tile("nodes", all.length, "count-nodes"),
      ...shown.map((l) => tile(livenessName(l), all.filter((n) => n.liveness === l).length, `count-${livenessName(l)}`)),
      tile(
        "GPUs",
        all.reduce((sum, n) => sum + n.gpuCount, 0),
        "count-gpus",
      ),
      tile("connected", all.filter((n) => n.connected).length, "count-connected"),
    ]);
    progress.textContent = rollout === undefined ? "" : rolloutLine(rollout);
    const rolloutOf = (n: Node) =>
      rollout === undefined ? undefined : { version: rollout.version, node: rollout.nodes.find((r) => r.nodeId === n.id) };
    morph(list, [
      all.length === 0
        ? h("p", {}, "No nodes yet. Create an enrollment token on the ", h("a", { href: "#/tokens" }, "Tokens"), " page.")
        : table(
            ["Name", "Liveness", "Agent", "GPUs", "Connected", "Last heartbeat", "Labels"],
            all.map((n) => [
              h("a", { href: `#/nodes/${n.id}` }, n.name || n.id),
              h("span", { class: `badge ${livenessName(n.liveness)}`, "data-testid": `liveness-${n.id}` }, livenessName(n.liveness)),
              h("span", { "data-testid": `agent-${n.id}` }, agentText(n, rolloutOf(n))),
              n.gpuCount,
              n.connected ? "yes" : "no",
              age(n.lastHeartbeatAt),
              labels(n.labels),
            ]),
            "nodes",
          ),
    ]);
    morph(transitions, [
      recent.length === 0
        ? h("p", {}, "None yet.")
        : table(
            ["Time", "Node", "Transition"],
            recent.map((e) => [
              time(e.time),
              h("a", { href: `#/nodes/${e.targetId}` }, nodes.get(e.targetId)?.name ?? e.targetId),
              e.action.replace(/^node\./, ""),
            ]),
            "transitions",
          ),
    ]);
  };
  const loadTransitions = async () => {
    recent = (await admin.listAuditEvents({ pageSize: 200 }, { signal })).events
      .filter((e) => transitionActions.has(e.action))
      .slice(0, 10);
    render();
  };
  // The rollout under way, if any, with its nodes: every 5 s while the page is open.
  const loadRollout = async () => {
    const active = activeRollout((await admin.listAgentRollouts({}, { signal })).rollouts);
    rollout = active === undefined ? undefined : (await admin.getAgentRollout({ rolloutId: active.id }, { signal })).rollout;
    render();
  };
  const rolloutTimer = setInterval(() => void loadRollout().catch(() => undefined), 5_000);
  signal.addEventListener("abort", () => clearInterval(rolloutTimer));
  render();
  await Promise.all([loadTransitions(), loadRollout().catch(() => undefined)]);
  // First every node, then each change; a new node or a liveness change also refreshes the
  // transitions (at most every half second, so the first burst costs one call).
  let refreshQueued = false;
  const refreshSoon = () => {
    if (refreshQueued) return;
    refreshQueued = true;
    setTimeout(() => {
      refreshQueued = false;
      if (!signal.aborted) void loadTransitions().catch(() => undefined);
    }, 500);
  };
  for await (const res of admin.watchNodes({}, { signal, timeoutMs: 0 })) {
    const n = res.node;
    if (n === undefined) continue;
    const before = nodes.get(n.id);
    nodes.set(n.id, n);
    render();
    if (before?.liveness !== n.liveness) refreshSoon();
  }
}
