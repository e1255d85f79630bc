// The audit log, newest first, filtered by action, target and actor, a page at a time.
import { admin } from "../api.js";
import { formValues, h, table } from "../dom.js";
import { labels, time } from "../format.js";

export async function auditPage(main: HTMLElement, signal: AbortSignal, params: URLSearchParams): Promise<void> {
  const filter = { action: params.get("action") ?? "", targetId: params.get("target") ?? "", actor: params.get("actor") ?? "" };
  const form = h(
    "form",
    {
      class: "inline",
      onsubmit: (e) => {
        e.preventDefault();
        const v = formValues(form);
        const q = new URLSearchParams();
        for (const [k, name] of [
          ["action", "action"],
          ["target", "target"],
          ["actor", "actor"],
        ] as const)
          if (v[name]) q.set(k, v[name]!);
        location.hash = `#/audit?${q}`;
      },
    },
    h("label", {}, "Action ", h("input", { name: "action", value: filter.action, placeholder: "e.g. node.enrolled" })),
    h("label", {}, "Target ", h("input", { name: "target", value: filter.targetId, placeholder: "id" })),
    h(
      "label",
      {},
      "Actor ",
      h("input", { name: "actor", value: filter.actor, placeholder: "email, user:<id>, break-glass, node:<id>, system" }),
    ),
    h("button", { type: "submit" }, "Filter"),
  );
  const rows = h("tbody", {});
  const more = h("button", { type: "button", class: "small" }, "Older");
  main.replaceChildren(
    h("h1", {}, "Audit log"),
    form,
    h(
      "table",
      { "data-testid": "audit" },
      h("thead", {}, h("tr", {}, ...["Time", "Actor", "Action", "Target", "Details"].map((t) => h("th", {}, t)))),
      rows,
    ),
    more,
  );
  let pageToken = "";
  const load = async () => {
    const page = await admin.listAuditEvents({ ...filter, pageSize: 50, pageToken }, { signal });
    for (const e of page.events) {
      rows.append(
        table(
          [],
          [
            [
              time(e.time),
              e.actorName ? `${e.actorName} (${e.actor})` : e.actor,
              e.action,
              `${e.targetType} ${e.targetId}`,
              labels(e.details),
            ],
          ],
        ).tBodies[0]!.rows[0]!,
      );
    }
    pageToken = page.nextPageToken;
    more.hidden = pageToken === "";
  };
  more.addEventListener("click", () => void load());
  await load();
}
