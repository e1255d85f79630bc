// How nodes look on a terminal: the list table, one node's detail, and what a decommission would
// do and did. Pure functions of the API messages, so they are tested without a server.
import {
  GpuState,
  type DecommissionNodeResponse,
  type GetNodeResponse,
  type Node,
  type PreviewDecommissionResponse,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { Liveness, type HostInfo } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import {
  clean,
  dateOf,
  enumName,
  fields,
  formatAge,
  formatBytes,
  formatLabels,
  formatPercent,
  formatTime,
  formatTimeAndAge,
  table,
} from "../format.js";

const yesNo = (b: boolean) => (b ? "yes" : "no");
export const nodeLabel = (n: Node | undefined, id: string) => (n?.name ? `${id} (${n.name})` : id);
/** The agent's version, flagged when the server will refuse it at its next Hello. */
const agentOf = (n: Node) => (n.agentVersion || "-") + (n.agentOutdated ? " (outdated)" : "");

/** The node list table. Pure. */
export function renderNodeTable(nodes: Node[], now: Date): string {
  return table(
    ["ID", "NAME", "LIVENESS", "GPUS", "LAST HEARTBEAT", "AGENT", "CONNECTED"],
    nodes.map((n) => [
      n.id,
      n.name || "-",
      enumName(Liveness, n.liveness),
      String(n.gpuCount),
      formatAge(dateOf(n.lastHeartbeatAt), now),
      agentOf(n),
      yesNo(n.connected),
    ]),
  );
}

function indent(text: string, by = "  "): string {
  return text
    .split("\n")
    .map((l) => (l === "" ? l : by + l))
    .join("\n");
}

/** A titled table, indented under its title; `none` when there are no rows. */
function tableSection(title: string, none: string, headers: string[], rows: string[][]): string {
  return `${title}\n${rows.length === 0 ? `  ${none}\n` : indent(table(headers, rows))}`;
}

/** A table nested inside a section, e.g. a host's disks. */
const subTable = (title: string, headers: string[], rows: string[][]) => `  ${title}:\n${indent(table(headers, rows), "    ")}`;

function nodeSection(n: Node, now: Date): string {
  return (
    "Node\n" +
    fields([
      ["ID", n.id],
      ["Name", n.name || "-"],
      ["Liveness", enumName(Liveness, n.liveness)],
      ["Disabled because", n.disabledReason || undefined],
      ["Decommissioned", n.decommissionedAt ? formatTimeAndAge(dateOf(n.decommissionedAt), now) : undefined],
      ["Labels", formatLabels(n.labels)],
      ["Enrolled", formatTimeAndAge(dateOf(n.createdAt), now)],
      ["Last heartbeat", n.lastHeartbeatAt ? formatTimeAndAge(dateOf(n.lastHeartbeatAt), now) : "never"],
      ["Connected", yesNo(n.connected) + (n.sessionReplica ? ` (session on replica ${n.sessionReplica})` : "")],
      ["Agent", (n.agentVersion || "-") + (n.protocolVersion > 0 ? ` (protocol ${n.protocolVersion})` : "")],
      [
        "Agent outdated",
        n.agentOutdated
          ? "yes: older than the oldest version this control plane accepts; it is refused at Hello until upgraded"
          : undefined,
      ],
      ["Capabilities", n.capabilities.length > 0 ? n.capabilities.join(", ") : "-"],
    ])
  );
}

function hostSection(h: HostInfo | undefined): string {
  if (h === undefined) return "Host\n  (no inventory applied yet)\n";
  const host =
    "Host\n" +
    fields([
      ["Hostname", h.hostname || "-"],
      ["OS", [h.osName, h.osVersion].filter(Boolean).join(" ") || "-"],
      ["Kernel", h.kernel || "-"],
      ["Architecture", h.architecture || "-"],
      ["CPU", h.cpuModel ? `${h.cpuModel} (${h.cpuCores} cores)` : h.cpuCores ? `${h.cpuCores} cores` : "-"],
      ["Memory", h.memoryTotalBytes > 0n ? formatBytes(h.memoryTotalBytes) : "-"],
    ]);
  if (h.disks.length === 0) return host;
  return (
    host +
    subTable(
      "Disks",
      ["MOUNT", "FILESYSTEM", "SIZE"],
      h.disks.map((d) => [d.mount, d.filesystem || "-", formatBytes(d.sizeBytes)]),
    )
  );
}

function gpusSection(res: GetNodeResponse, now: Date): string {
  return tableSection(
    `GPUs (${res.gpus.length})`,
    "(none reported)",
    ["UUID", "INDEX", "PCI", "MODEL", "MEMORY", "STATE"],
    res.gpus.map((g) => [
      g.info?.uuid ?? "-",
      String(g.info?.index ?? "-"),
      g.info?.pciBusId || "-",
      g.info?.model || "-",
      g.info ? formatBytes(g.info.memoryTotalBytes) : "-",
      g.state === GpuState.MISSING ? `missing since ${formatAge(dateOf(g.missingSince), now)}` : enumName(GpuState, g.state),
    ]),
  );
}

const usedOf = (used: bigint, total: bigint) => `${formatBytes(used)} / ${formatBytes(total)}`;
const shareOf = (used: bigint, total: bigint) => formatPercent((Number(used) / Number(total)) * 100);

function telemetrySection(res: GetNodeResponse, now: Date): string {
  const t = res.telemetry;
  if (t === undefined || t.telemetry === undefined) return "Telemetry\n  (none received yet)\n";
  const m = t.telemetry;
  let text =
    `Telemetry (sequence ${t.sequence})\n` +
    fields([
      ["Observed", formatTimeAndAge(dateOf(t.observedAt), now)],
      ["Received", formatTimeAndAge(dateOf(t.receivedAt), now)],
      ["CPU", m.cpuUtilizationPercent !== undefined ? formatPercent(m.cpuUtilizationPercent) : "-"],
      ["Load", `${[m.loadAverage1m, m.loadAverage5m, m.loadAverage15m].map((l) => l.toFixed(2)).join(" ")} (1m 5m 15m)`],
      [
        "Memory",
        m.memoryTotalBytes > 0n
          ? `${usedOf(m.memoryUsedBytes, m.memoryTotalBytes)} (${shareOf(m.memoryUsedBytes, m.memoryTotalBytes)})`
          : formatBytes(m.memoryUsedBytes),
      ],
    ]);
  if (m.mounts.length > 0) {
    text += subTable(
      "Mounts",
      ["MOUNT", "USED", "SIZE", "USE"],
      m.mounts.map((u) => [
        u.mount,
        formatBytes(u.usedBytes),
        formatBytes(u.sizeBytes),
        u.sizeBytes > 0n ? shareOf(u.usedBytes, u.sizeBytes) : "-",
      ]),
    );
  }
  if (m.gpus.length > 0) {
    const totals = new Map(res.gpus.map((g) => [g.info?.uuid ?? "", g.info?.memoryTotalBytes ?? 0n]));
    text += subTable(
      "GPUs",
      ["GPU", "UTIL", "MEMORY", "TEMP", "POWER"],
      m.gpus.map((g) => {
        const total = totals.get(g.uuid) ?? 0n;
        return [
          g.uuid,
          formatPercent(g.utilizationPercent),
          total > 0n ? usedOf(g.memoryUsedBytes, total) : formatBytes(g.memoryUsedBytes),
          `${Math.round(g.temperatureCelsius)}°C`,
          `${g.powerWatts.toFixed(1)} W`,
        ];
      }),
    );
  }
  return text;
}

function cursorsSection(res: GetNodeResponse, now: Date): string {
  return tableSection(
    "Stream cursors",
    "(none yet)",
    ["STREAM", "SEQUENCE", "APPLIED", "OBSERVED", "RECEIVED", "REJECTION"],
    res.cursors.map((c) => [
      c.stream,
      String(c.sequence),
      String(c.appliedSequence),
      c.appliedObservedAt ? formatTime(dateOf(c.appliedObservedAt)) : "-",
      formatAge(dateOf(c.receivedAt), now),
      c.rejectionReason || "-",
    ]),
  );
}

function credentialsSection(res: GetNodeResponse): string {
  return tableSection(
    "Credentials",
    "(none)",
    ["SERIAL", "ISSUED", "EXPIRES", "REVOKED", "REASON"],
    res.credentials.map((c) => [
      c.serial,
      formatTime(dateOf(c.issuedAt)),
      formatTime(dateOf(c.expiresAt)),
      c.revokedAt ? formatTime(dateOf(c.revokedAt)) : "-",
      c.revokedAt ? c.revokedReason || "-" : "-",
    ]),
  );
}

/** `nodes get`: the node in readable sections. Pure. */
export function renderNodeDetail(res: GetNodeResponse, now: Date): string {
  const n = res.node;
  return [
    ...(n !== undefined ? [nodeSection(n, now), hostSection(n.host)] : []),
    gpusSection(res, now),
    telemetrySection(res, now),
    cursorsSection(res, now),
    credentialsSection(res),
  ].join("\n");
}

const list = (items: string[]) => (items.length === 0 ? " none\n" : `\n${items.map((i) => `    ${clean(i)}\n`).join("")}`);

/** What a decommission would do. Pure. */
export function renderPreview(p: PreviewDecommissionResponse, id: string): string {
  const n = p.node;
  return (
    `Decommissioning node ${clean(nodeLabel(n, id))}` +
    (n ? ` [${enumName(Liveness, n.liveness)}${n.connected ? ", connected" : ""}]` : "") +
    " would:\n" +
    `  revoke ${p.credentialSerials.length} active credential(s):${list(p.credentialSerials)}` +
    `  fail ${p.jobIds.length} unfinished job(s):${list(p.jobIds)}` +
    `  reclaim ${p.deploymentIds.length} deployment(s):${list(p.deploymentIds)}` +
    "This is terminal: the node can never be enabled or re-enrolled under this id.\n"
  );
}

/** The outcome of a decommission. Pure. */
export function renderDecommission(d: DecommissionNodeResponse, id: string): string {
  return (
    `Node ${clean(nodeLabel(d.node, id))} is decommissioned.\n` +
    `  revoked credentials:${list(d.revokedSerials)}` +
    `  failed jobs:${list(d.failedJobIds)}` +
    `  reclaimed deployments:${list(d.reclaimedDeploymentIds)}`
  );
}
