// Enrollment tokens: list, revoke, create (the one-time join command is shown once, here), and
// pre-register a node (a token bound to a node record created now).
import { create } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import { EnrollmentTokenState } from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { admin, may, methods } from "../api.js";
import { formValues, h, section, table } from "../dom.js";
import { showError } from "../errors.js";
import { age, enumText, labels, parseDurationSeconds, parseLabels, time } from "../format.js";

export async function tokensPage(main: HTMLElement, signal: AbortSignal): Promise<void> {
  const shown = h("div", {});
  const listBox = h("div", {});
  main.replaceChildren(
    h("h1", {}, "Enrollment tokens"),
    shown,
    may(methods.createEnrollmentToken) ? tokenForm(main, shown, () => void load()) : "",
    may(methods.registerNode) ? registerForm(main, shown, () => void load()) : "",
    section("Tokens", listBox),
  );
  const load = async () => {
    const tokens = (await admin.listEnrollmentTokens({ pageSize: 200 }, { signal })).enrollmentTokens;
    listBox.replaceChildren(
      tokens.length === 0
        ? h("p", {}, "No tokens.")
        : table(
            ["ID", "State", "Name", "Node", "Labels", "Created", "Expires", ""],
            tokens.map((t) => [
              t.id.slice(0, 8),
              enumText(EnrollmentTokenState, t.state),
              t.nodeName || "-",
              t.nodeId ? h("a", { href: `#/nodes/${t.nodeId}` }, t.nodeId.slice(0, 8)) : "-",
              labels(t.labels),
              age(t.createdAt),
              time(t.expiresAt),
              t.state === EnrollmentTokenState.ACTIVE && may(methods.revokeEnrollmentToken)
                ? h(
                    "button",
                    {
                      type: "button",
                      class: "small",
                      onclick: () =>
                        admin.revokeEnrollmentToken({ id: t.id }).then(
                          () => load(),
                          (e: unknown) => showError(main, e),
                        ),
                    },
                    "Revoke",
                  )
                : "",
            ]),
            "tokens",
          ),
    );
  };
  await load();
}

function ttlOf(text: string) {
  return text.trim() === "" ? undefined : create(DurationSchema, { seconds: parseDurationSeconds(text) });
}

/** The secret, once: it is in this page's DOM until the operator leaves it, and nowhere else. */
function showOnce(shown: HTMLElement, title: string, token: string, joinCommand: string): void {
  const code = h("code", { "data-testid": "join-command" }, joinCommand);
  shown.replaceChildren(
    h(
      "div",
      { class: "once", role: "status" },
      h("h2", {}, title),
      h("p", {}, "Shown once: the server keeps only a hash of the token. Run this on the node:"),
      h("pre", {}, code),
      h("button", { type: "button", class: "small", onclick: () => void navigator.clipboard?.writeText(joinCommand) }, "Copy"),
      h("p", { class: "hint" }, "Token: ", h("code", { "data-testid": "token" }, token)),
    ),
  );
}

function tokenForm(main: HTMLElement, shown: HTMLElement, reload: () => void): HTMLElement {
  const form = h(
    "form",
    {
      "data-testid": "create-token",
      onsubmit: (e) => {
        e.preventDefault();
        const v = formValues(form);
        let request: Parameters<typeof admin.createEnrollmentToken>[0];
        try {
          request = { nodeName: v.name ?? "", labels: parseLabels(v.labels ?? ""), ttl: ttlOf(v.ttl ?? "") };
        } catch (err) {
          return showError(main, err);
        }
        admin.createEnrollmentToken(request).then(
          (r) => {
            showOnce(shown, "New enrollment token", r.token, r.joinCommand);
            form.reset();
            reload();
          },
          (err: unknown) => showError(main, err),
        );
      },
    },
    h("label", {}, "Node name ", h("input", { name: "name", type: "text", placeholder: "optional", "data-testid": "token-name" })),
    h("label", {}, "Labels ", h("input", { name: "labels", type: "text", placeholder: "rack=r7, zone=a" })),
    h("label", {}, "Lifetime ", h("input", { name: "ttl", type: "text", placeholder: "10m" })),
    h("button", { type: "submit", "data-testid": "token-submit" }, "Create token"),
  );
  return section("New token", form);
}

function registerForm(main: HTMLElement, shown: HTMLElement, reload: () => void): HTMLElement {
  const form = h(
    "form",
    {
      "data-testid": "register-node",
      onsubmit: (e) => {
        e.preventDefault();
        const v = formValues(form);
        let request: Parameters<typeof admin.registerNode>[0];
        try {
          request = { name: v.name ?? "", labels: parseLabels(v.labels ?? ""), ttl: ttlOf(v.ttl ?? "") };
        } catch (err) {
          return showError(main, err);
        }
        admin.registerNode(request).then(
          (r) => {
            showOnce(shown, `Registered node ${r.node?.name ?? ""}`, r.token, r.joinCommand);
            form.reset();
            reload();
          },
          (err: unknown) => showError(main, err),
        );
      },
    },
    h("label", {}, "Node name ", h("input", { name: "name", type: "text", required: true })),
    h("label", {}, "Labels ", h("input", { name: "labels", type: "text", placeholder: "rack=r7, zone=a" })),
    h("label", {}, "Lifetime ", h("input", { name: "ttl", type: "text", placeholder: "10m" })),
    h("button", { type: "submit" }, "Register node"),
  );
  return section("Pre-register a node", form);
}
