// Service keys: the list (scope, expiry, limits, last use, requests and tokens over the last 24 hours
// from the usage aggregates), create (the secret shown once, with a copy button) and revoke, both for the
// admin role; the read-only role sees the list, the controls disabled, with a note.
import { create } from "@bufbuild/protobuf";
import { DurationSchema, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { type ServiceKey, type ServiceKeyLimits, UsageGrouping, type UsageRow } from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { admin, may, methods } from "../api.js";
import { confirmInto, readOnlyNote } from "../confirm.js";
import { formValues, h, section, table } from "../dom.js";
import { showError } from "../errors.js";
import { age, minuteAge, parseDurationSeconds, time } from "../format.js";
import { tokensOf } from "../usage.js";

const dayMs = 86_400_000;

export async function serviceKeysPage(main: HTMLElement, signal: AbortSignal): Promise<void> {
  const shown = h("div", {});
  const confirmBox = h("div", {});
  const listBox = h("div", {});
  const canCreate = may(methods.createServiceKey);
  const canRevoke = may(methods.revokeServiceKey);
  main.replaceChildren(
    h("h1", {}, "Service keys"),
    shown,
    canCreate && canRevoke ? "" : readOnlyNote(),
    keyForm(main, shown, canCreate, () => void load()),
    section("Keys", confirmBox, listBox),
  );
  const load = async () => {
    const [keys, usage] = await Promise.all([
      admin.listServiceKeys({ pageSize: 1000, includeRevoked: true }, { signal }),
      admin.getUsage({ since: timestampFromMs(Date.now() - dayMs), by: UsageGrouping.KEY }, { signal }),
    ]);
    const used = new Map(usage.rows.map((r) => [r.keyId, r]));
    listBox.replaceChildren(
      keys.keys.length === 0
        ? h("p", {}, "No service keys.")
        : table(
            [
              "Name",
              "Prefix",
              "Deployments",
              "State",
              "Expires",
              "Limits",
              "Owner",
              "Last used",
              "Requests (24h)",
              "Tokens (24h)",
              "Created",
              "",
            ],
            keys.keys.map((k) => row(k, used.get(k.id), canRevoke, () => revoke(k))),
            "keys",
          ),
    );
  };
  const revoke = (k: ServiceKey) =>
    confirmInto(confirmBox, `Revoke key ${k.name} (${k.prefix}...)? Clients using it are refused at once.`, () =>
      admin.revokeServiceKey({ id: k.id, reason: "revoked from the console" }).then(
        () => load(),
        (err: unknown) => showError(main, err),
      ),
    );
  await load();
}

function row(k: ServiceKey, u: UsageRow | undefined, canRevoke: boolean, revoke: () => void) {
  const revoked = k.revokedAt !== undefined;
  const expired = k.expiresAt !== undefined && Number(k.expiresAt.seconds) * 1000 < Date.now();
  return [
    h("span", { "data-testid": `key-${k.name}` }, k.name),
    h("code", {}, `${k.prefix}...`),
    // Scope entries are free text (any deployment name may be named before it exists).
    h("span", { class: "scope" }, k.deployments.join(", ")),
    revoked ? `revoked ${age(k.revokedAt)}` : expired ? "expired" : "active",
    k.expiresAt === undefined ? "never" : time(k.expiresAt),
    limitsText(k.limits),
    h("span", { "data-testid": `owner-${k.name}` }, k.owner?.email ?? "-"),
    // To the minute: the UTC minute on hover.
    h("span", { "data-testid": `last-used-${k.name}`, title: k.lastUsedAt && time(k.lastUsedAt) }, minuteAge(k.lastUsedAt)),
    h("a", { href: `#/usage?key=${k.id}` }, String(u?.requests ?? 0n)),
    String(u === undefined ? 0 : tokensOf(u)),
    age(k.createdAt),
    revoked
      ? ""
      : h("button", { type: "button", class: "small", disabled: !canRevoke, "data-testid": `revoke-${k.name}`, onclick: revoke }, "Revoke"),
  ];
}

export function limitsText(l: ServiceKeyLimits | undefined): string {
  if (l === undefined) return "none";
  const parts = [
    l.requestsPerMinute > 0 ? `${l.requestsPerMinute} req/min` : "",
    l.tokensPerMinute > 0 ? `${l.tokensPerMinute} tokens/min` : "",
    l.dailyTokens > 0n ? `${l.dailyTokens} tokens/day` : "",
    l.monthlyTokens > 0n ? `${l.monthlyTokens} tokens/month` : "",
  ].filter((p) => p !== "");
  return parts.length === 0 ? "none" : parts.join(", ");
}

function whole(text: string | undefined, what: string, max: number): number {
  const t = (text ?? "").trim();
  if (t === "") return 0;
  const n = Number(t);
  if (!Number.isSafeInteger(n) || n < 0 || n > max) throw new Error(`${what}: a whole number from 0 to ${max}`);
  return n;
}

/** The secret, once: in this page's DOM until the operator leaves it, and nowhere else. */
function showSecret(shown: HTMLElement, name: string, secret: string): void {
  const status = h("span", { class: "hint", "data-testid": "copy-status" });
  shown.replaceChildren(
    h(
      "div",
      { class: "once", role: "status" },
      h("h2", {}, `New service key ${name}`),
      h("p", {}, "Shown once: the server keeps only a hash. Send it as Authorization: Bearer <secret>."),
      h("pre", {}, h("code", { "data-testid": "key-secret" }, secret)),
      h(
        "button",
        {
          type: "button",
          class: "small",
          "data-testid": "copy-secret",
          onclick: () =>
            void (navigator.clipboard?.writeText(secret) ?? Promise.reject(new Error("no clipboard"))).then(
              () => (status.textContent = " Copied."),
              () => (status.textContent = " Copy failed: select the text instead."),
            ),
        },
        "Copy",
      ),
      status,
    ),
  );
}

function keyForm(main: HTMLElement, shown: HTMLElement, allowed: boolean, reload: () => void): HTMLElement {
  const input = (name: string, label: string, extra: Record<string, string | number | boolean> = {}) =>
    h("label", {}, label, " ", h("input", { name, disabled: !allowed, "data-testid": `key-${name}-input`, ...extra }));
  const form = h(
    "form",
    {
      "data-testid": "create-key",
      onsubmit: (e) => {
        e.preventDefault();
        const v = formValues(form);
        let request: Parameters<typeof admin.createServiceKey>[0];
        try {
          const deployments = (v.deployments ?? "")
            .split(",")
            .map((d) => d.trim())
            .filter((d) => d !== "");
          const limits = {
            requestsPerMinute: whole(v.rpm, "requests per minute", 1_000_000),
            tokensPerMinute: whole(v.tpm, "tokens per minute", 1_000_000_000),
            dailyTokens: BigInt(whole(v.daily, "tokens per day", Number.MAX_SAFE_INTEGER)),
            monthlyTokens: BigInt(whole(v.monthly, "tokens per month", Number.MAX_SAFE_INTEGER)),
          };
          const ttl = (v.ttl ?? "").trim();
          request = {
            name: v.name ?? "",
            deployments,
            ttl: ttl === "" ? undefined : create(DurationSchema, { seconds: parseDurationSeconds(ttl) }),
            limits,
          };
        } catch (err) {
          return showError(main, err);
        }
        admin.createServiceKey(request).then(
          (r) => {
            showSecret(shown, r.key!.name, r.secret);
            form.reset();
            reload();
          },
          (err: unknown) => showError(main, err),
        );
      },
    },
    input("name", "Name", { required: true, placeholder: "a-z 0-9 . _ -" }),
    input("deployments", "Deployments", { required: true, placeholder: "tiny, chat" }),
    input("ttl", "Lifetime", { placeholder: "never, or 30d" }),
    input("rpm", "Requests/min", { type: "number", min: 0, placeholder: "no limit" }),
    input("tpm", "Tokens/min", { type: "number", min: 0, placeholder: "no limit" }),
    input("daily", "Tokens/day", { type: "number", min: 0, placeholder: "no limit" }),
    input("monthly", "Tokens/month", { type: "number", min: 0, placeholder: "no limit" }),
    h("button", { type: "submit", disabled: !allowed, "data-testid": "key-submit" }, "Create key"),
  );
  return section("New key", form);
}
