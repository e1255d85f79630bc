// One node: facts, GPUs, telemetry with small charts (samples kept while the page is open), stream
// cursors with the last rejection reason, credentials and the node's audit events.
import type { GetNodeResponse } from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { GpuState } from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { Liveness } from "../../../gen/proto/modelforge/common/v1/common_pb.js";
import { admin, may, methods, pause } from "../api.js";
import { lineChart, type Series } from "../chart.js";
import { h, morph, section, table } from "../dom.js";
import { age, bytes, enumText, labels, livenessName, time } from "../format.js";
import { showError } from "../errors.js";

const pollMs = 2_000;
const keptSamples = 60;

interface Sample {
  memoryPercent: number;
  gpus: Map<string, { utilization: number; temperature: number }>;
  /**
   * CPU utilisation and load averages (issue 15's additive Telemetry fields), read by name so the
   * page works with contracts and agents from before them; undefined when not reported.
   */
  cpuPercent: number | undefined;
  load: [number, number, number] | undefined;
}

export function nodePage(nodeId: string) {
  return async (main: HTMLElement, signal: AbortSignal): Promise<void> => {
    const samples: Sample[] = [];
    let lastSequence = -1n;
    const body = h("div", {});
    main.replaceChildren(body, section("Audit", nodeAudit(nodeId)));
    while (!signal.aborted) {
      const res = await admin.getNode({ nodeId }, { signal });
      const t = res.telemetry;
      if (t?.telemetry !== undefined && t.sequence !== lastSequence) {
        lastSequence = t.sequence;
        const m = t.telemetry;
        const extra = m as unknown as Record<string, unknown>;
        const cpu = extra.cpuUtilizationPercent;
        const load = [extra.loadAverage1m, extra.loadAverage5m, extra.loadAverage15m];
        samples.push({
          memoryPercent: m.memoryTotalBytes > 0n ? (Number(m.memoryUsedBytes) / Number(m.memoryTotalBytes)) * 100 : 0,
          gpus: new Map(m.gpus.map((g) => [g.uuid, { utilization: g.utilizationPercent, temperature: g.temperatureCelsius }])),
          cpuPercent: typeof cpu === "number" ? cpu : undefined,
          load: load.every((l) => typeof l === "number") ? (load as [number, number, number]) : undefined,
        });
        if (samples.length > keptSamples) samples.shift();
      }
      morph(body, render(res, samples, main));
      await pause(pollMs, signal);
    }
  };

  function render(res: GetNodeResponse, samples: Sample[], main: HTMLElement): HTMLElement[] {
    const n = res.node!;
    const host = n.host;
    const facts = h(
      "dl",
      { class: "facts" },
      ...(
        [
          ["ID", n.id],
          [
            "Liveness",
            h(
              "span",
              {},
              h("span", { class: `badge ${livenessName(n.liveness)}`, "data-testid": "node-liveness" }, livenessName(n.liveness)),
              // A pre-registered node has no credential until its agent enrolls with the token.
              res.credentials.length === 0 ? " registered, waiting for its agent to enroll" : "",
            ),
          ],
          ["Connected", n.connected ? "yes" : "no"],
          ["Last heartbeat", `${age(n.lastHeartbeatAt)} (${time(n.lastHeartbeatAt)})`],
          ["Labels", labels(n.labels)],
          ["Agent", n.agentVersion || "-"],
          ["Capabilities", n.capabilities.join(", ") || "-"],
          [
            "Host",
            host
              ? `${host.hostname} · ${host.osName} ${host.osVersion} · ${host.architecture} · ${host.cpuCores} cores · ${bytes(host.memoryTotalBytes)}`
              : "-",
          ],
          ["Disabled", n.disabledReason || "-"],
        ] as [string, Node | string][]
      ).flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
    );
    const controls = nodeControls(n.id, n.liveness === Liveness.DISABLED, main);
    const gpus = table(
      ["Index", "UUID", "Model", "Memory", "State", "Last seen"],
      res.gpus.map((g) => [
        g.info?.index ?? "-",
        g.info?.uuid ?? "-",
        g.info?.model ?? "-",
        bytes(g.info?.memoryTotalBytes ?? 0n),
        enumText(GpuState, g.state),
        age(g.lastSeenAt),
      ]),
      "gpus",
    );
    const gpuIds = [...new Set(samples.flatMap((s) => [...s.gpus.keys()]))];
    const gpuSeries = (pick: (g: { utilization: number; temperature: number }) => number): Series[] =>
      gpuIds.map((id, i) => ({ name: `GPU${i}`, values: samples.map((s) => (s.gpus.has(id) ? pick(s.gpus.get(id)!) : 0)) }));
    const charts = h(
      "div",
      { class: "charts" },
      lineChart("Memory", [{ name: "used", values: samples.map((s) => s.memoryPercent) }], 100, "%", "chart-memory"),
      samples.some((s) => s.cpuPercent !== undefined)
        ? lineChart("CPU", [{ name: "busy", values: samples.map((s) => s.cpuPercent ?? 0) }], 100, "%", "chart-cpu")
        : null,
      samples.some((s) => s.load !== undefined)
        ? lineChart(
            "Load",
            ["1m", "5m", "15m"].map((name, i) => ({ name, values: samples.map((s) => s.load?.[i] ?? 0) })),
            // Scaled to the core count, where a load becomes a queue.
            Math.max(1, host?.cpuCores ?? 1, ...samples.flatMap((s) => s.load ?? [])),
            "",
            "chart-load",
            2,
          )
        : null,
      gpuIds.length > 0
        ? lineChart(
            "GPU utilisation",
            gpuSeries((g) => g.utilization),
            100,
            "%",
            "chart-gpu-util",
          )
        : null,
      gpuIds.length > 0
        ? lineChart(
            "GPU temperature",
            gpuSeries((g) => g.temperature),
            100,
            "°C",
            "chart-gpu-temp",
          )
        : null,
    );
    const t = res.telemetry;
    return [
      h("h1", {}, n.name || n.id),
      controls,
      facts,
      section(`GPUs (${res.gpus.length})`, gpus),
      section(
        "Telemetry",
        t === undefined
          ? h("p", {}, "No telemetry yet.")
          : h("p", {}, `Sample ${t.sequence}, observed ${time(t.observedAt)}, received ${time(t.receivedAt)}`),
        charts,
      ),
      section(
        "Stream cursors",
        table(
          ["Stream", "Sequence", "Applied", "Applied observation", "Received", "Rejection"],
          res.cursors.map((c) => [
            c.stream,
            String(c.sequence),
            String(c.appliedSequence),
            time(c.appliedObservedAt),
            time(c.receivedAt),
            c.rejectionReason || "-",
          ]),
          "cursors",
        ),
      ),
      section(
        "Credentials",
        table(
          ["Serial", "Issued", "Expires", "Revoked", "Reason"],
          res.credentials.map((c) => [c.serial, time(c.issuedAt), time(c.expiresAt), time(c.revokedAt), c.revokedReason || "-"]),
          "credentials",
        ),
      ),
    ];
  }
}

function nodeControls(nodeId: string, disabled: boolean, main: HTMLElement): HTMLElement {
  const bar = h("div", { class: "controls" });
  if (may(methods.createJob)) bar.append(h("a", { class: "button", href: `#/jobs?node=${nodeId}` }, "New job"));
  if (disabled && may(methods.enableNode)) {
    bar.append(
      h(
        "button",
        {
          type: "button",
          "data-testid": "enable-node",
          onclick: () => void admin.enableNode({ nodeId }).catch((e: unknown) => showError(main, e)),
        },
        "Enable",
      ),
    );
  } else if (!disabled && may(methods.disableNode)) {
    bar.append(
      h(
        "button",
        {
          type: "button",
          "data-testid": "disable-node",
          onclick: () => void admin.disableNode({ nodeId, reason: "disabled from the console" }).catch((e: unknown) => showError(main, e)),
        },
        "Disable",
      ),
    );
  }
  return bar;
}

function nodeAudit(nodeId: string): HTMLElement {
  const box = h("div", {}, "Loading...");
  admin.listAuditEvents({ targetId: nodeId, pageSize: 20 }).then(
    (r) =>
      box.replaceChildren(
        table(
          ["Time", "Actor", "Action", "Details"],
          r.events.map((e) => [time(e.time), e.actor, e.action, labels(e.details)]),
          "node-audit",
        ),
      ),
    () => box.replaceChildren("Audit events could not be loaded."),
  );
  return box;
}
