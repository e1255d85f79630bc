// Runtime profiles: the list, and create for the admin role with the CLI's checks (an engine from
// the closed set; context size, threads and memory within the contract's bounds). Profiles are
// immutable: the same name with other content is refused by the server (already_exists).
import { EngineKind, type RuntimeProfileSpec } from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { RuntimeProfile as Profile } from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { admin, may, methods } from "../api.js";
import { readOnlyNote } from "../confirm.js";
import { formValues, h, section, table } from "../dom.js";
import { showError } from "../errors.js";
import { age, bytes } from "../format.js";

const engines: [string, EngineKind][] = [
  ["llama.cpp", EngineKind.LLAMA_CPP],
  ["openai-http", EngineKind.OPENAI_HTTP],
];
const engineLabel = (kind: EngineKind | undefined) => engines.find(([, k]) => k === kind)?.[0] ?? "unknown";

/** A whole number in [0, max] ("" is 0, the engine's default), or a clear error naming the field. */
function bounded(text: string | undefined, what: string, max: number): number {
  const t = (text ?? "").trim();
  if (t === "") return 0;
  const n = Number(t);
  if (!Number.isSafeInteger(n) || n < 0 || n > max) throw new Error(`${what}: a whole number from 0 to ${max}`);
  return n;
}

export async function runtimesPage(main: HTMLElement, signal: AbortSignal): Promise<void> {
  const listBox = h("div", {});
  const allowed = may(methods.createRuntimeProfile);
  const load = async () => {
    const profiles = (await admin.listRuntimeProfiles({ pageSize: 1000 }, { signal })).profiles;
    listBox.replaceChildren(profiles.length === 0 ? h("p", {}, "No runtime profiles.") : profileTable(profiles));
  };
  const form = h(
    "form",
    {
      "data-testid": "create-profile",
      onsubmit: (e) => {
        e.preventDefault();
        const v = formValues(form);
        let request: Parameters<typeof admin.createRuntimeProfile>[0];
        try {
          const engine = engines.find(([name]) => name === v.engine)?.[1];
          if (engine === undefined) throw new Error("engine: llama.cpp or openai-http");
          request = {
            name: v.name ?? "",
            engine,
            contextSize: bounded(v.contextSize, "context size", 1_048_576),
            threads: bounded(v.threads, "threads", 1024),
            memoryBytes: BigInt(bounded(v.memoryBytes, "memory bytes", 2 ** 50)),
          };
        } catch (err) {
          return showError(main, err);
        }
        admin.createRuntimeProfile(request).then(
          (r) => {
            main.querySelector(":scope > .error")?.remove();
            form.reset();
            if (!r.created) showError(main, new Error(`${r.profile!.name} already exists with this content`));
            void load();
          },
          (err: unknown) => showError(main, err),
        );
      },
    },
    h(
      "label",
      {},
      "Name ",
      h("input", { name: "name", required: true, pattern: "[a-z0-9][a-z0-9._-]{0,63}", disabled: !allowed, "data-testid": "profile-name" }),
    ),
    h(
      "label",
      {},
      "Engine ",
      h("select", { name: "engine", disabled: !allowed }, ...engines.map(([name]) => h("option", { value: name }, name))),
    ),
    h(
      "label",
      {},
      "Context size ",
      h("input", { name: "contextSize", type: "number", min: 0, placeholder: "engine default", disabled: !allowed }),
    ),
    h("label", {}, "Threads ", h("input", { name: "threads", type: "number", min: 0, placeholder: "engine default", disabled: !allowed })),
    h(
      "label",
      {},
      "Memory (openai-http) ",
      h("input", { name: "memoryBytes", type: "number", min: 0, placeholder: "bytes, 0 for none", disabled: !allowed }),
    ),
    h("button", { type: "submit", disabled: !allowed, "data-testid": "profile-submit" }, "Create profile"),
  );
  main.replaceChildren(
    h("h1", {}, "Runtime profiles"),
    section("Profiles", listBox),
    section(
      "New profile",
      allowed ? "" : readOnlyNote(),
      h("p", { class: "hint" }, "A profile never changes: to run with other parameters, create one under a new name."),
      form,
    ),
  );
  await load();
}

function profileTable(profiles: Profile[]): HTMLElement {
  const spec = (p: Profile): Partial<RuntimeProfileSpec> => p.spec ?? {};
  return table(
    ["Name", "Engine", "Context", "Threads", "Memory", "Content hash", "Created"],
    profiles.map((p) => [
      p.name,
      engineLabel(spec(p).engine),
      spec(p).contextSize ? String(spec(p).contextSize) : "default",
      spec(p).threads ? String(spec(p).threads) : "default",
      spec(p).memoryBytes ? bytes(spec(p).memoryBytes!) : "-",
      h("code", {}, (spec(p).contentHash ?? "").slice(0, 12)),
      age(p.createdAt),
    ]),
    "profiles",
  );
}
