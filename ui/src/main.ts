// The console's shell: sign-in, navigation and a hash router. Each page renders into the main
// element and stops its streams and polling when the route changes (its AbortSignal).
import "./style.css";
import { OperatorRole } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { describeError, isUnauthenticated, operator, signIn, signInOptions, signOut } from "./api.js";
import { showError } from "./errors.js";
import { formValues, h } from "./dom.js";
import { fleetPage } from "./pages/fleet.js";
import { nodePage } from "./pages/node.js";
import { jobsPage } from "./pages/jobs.js";
import { jobPage } from "./pages/job.js";
import { tokensPage } from "./pages/tokens.js";
import { auditPage } from "./pages/audit.js";
import { deploymentsPage } from "./pages/deployments.js";
import { deploymentPage } from "./pages/deployment.js";
import { serviceKeysPage } from "./pages/service-keys.js";
import { usagePage } from "./pages/usage.js";
import { artifactsPage } from "./pages/artifacts.js";
import { runtimesPage } from "./pages/runtimes.js";

export type Page = (main: HTMLElement, signal: AbortSignal, params: URLSearchParams) => Promise<void>;

const routes: [RegExp, (m: RegExpExecArray) => Page][] = [
  [/^\/$/, () => fleetPage],
  [/^\/nodes\/([0-9a-f-]{36})$/, (m) => nodePage(m[1]!)],
  [/^\/jobs$/, () => jobsPage],
  [/^\/jobs\/([0-9a-f-]{36})$/, (m) => jobPage(m[1]!)],
  [/^\/tokens$/, () => tokensPage],
  [/^\/audit$/, () => auditPage],
  [/^\/deployments$/, () => deploymentsPage],
  // Deployment names are a-z, 0-9 and "-"; ids are UUIDs: both fit.
  [/^\/deployments\/([a-z0-9-]{1,64})$/, (m) => deploymentPage(m[1]!)],
  [/^\/keys$/, () => serviceKeysPage],
  [/^\/usage$/, () => usagePage],
  [/^\/artifacts$/, () => artifactsPage],
  [/^\/runtimes$/, () => runtimesPage],
];

const app = document.getElementById("app")!;
let current: AbortController | undefined;

async function signInView(message = ""): Promise<void> {
  const options = await signInOptions();
  const form = h(
    "form",
    {
      class: "signin",
      onsubmit: (e) => {
        e.preventDefault();
        const key = formValues(form).key ?? "";
        signIn(key).then(
          () => route(),
          (err: unknown) => void signInView(describeError(err)),
        );
      },
    },
    h("h1", {}, "ModelForge console"),
    options.sso !== null
      ? h("p", {}, h("a", { class: "button", href: "/auth/login", "data-testid": "sso" }, "Sign in with single sign-on"))
      : null,
    options.breakGlass
      ? h(
          "label",
          {},
          options.sso !== null ? "Break-glass key " : "Operator key ",
          h("input", { type: "password", name: "key", autocomplete: "off", required: true, "data-testid": "key" }),
        )
      : null,
    options.breakGlass ? h("button", { type: "submit" }, "Sign in") : null,
    options.breakGlass ? h("p", { class: "hint" }, "The key is kept in this tab's session storage only.") : null,
    message !== "" ? h("p", { class: "error", role: "alert" }, message) : null,
  );
  app.replaceChildren(form);
}

const roleLabels: Partial<Record<OperatorRole, string>> = {
  [OperatorRole.ADMIN]: "admin",
  [OperatorRole.OPERATOR]: "operator",
  [OperatorRole.READ_ONLY]: "viewer",
};

function shell(): HTMLElement {
  const readOnly = operator.role === OperatorRole.READ_ONLY;
  const link = (href: string, text: string) => h("a", { href, class: location.hash === href ? "active" : "" }, text);
  const main = h("main", {});
  app.replaceChildren(
    h(
      "header",
      {},
      h("strong", {}, "ModelForge"),
      h(
        "nav",
        {},
        link("#/", "Fleet"),
        link("#/deployments", "Deployments"),
        link("#/keys", "Service keys"),
        link("#/usage", "Usage"),
        link("#/artifacts", "Artifacts"),
        link("#/runtimes", "Runtimes"),
        link("#/jobs", "Jobs"),
        link("#/tokens", "Tokens"),
        link("#/audit", "Audit"),
      ),
      operator.user.name !== ""
        ? h("span", { class: "user", "data-testid": "user", title: operator.user.email }, operator.user.name)
        : null,
      h(
        "span",
        { class: readOnly ? "role read-only" : "role", "data-testid": "role" },
        readOnly ? "viewer: monitoring" : (roleLabels[operator.role] ?? "unknown role"),
      ),
      h(
        "button",
        {
          type: "button",
          class: "link",
          onclick: () => {
            void signOut().finally(() => {
              location.hash = "#/";
              void route();
            });
          },
        },
        "Sign out",
      ),
    ),
    main,
  );
  return main;
}

async function route(): Promise<void> {
  current?.abort();
  current = new AbortController();
  const signal = current.signal;
  if (operator.role === OperatorRole.UNSPECIFIED) {
    // A break-glass key from this tab, else the session cookie of a single sign-on, if any.
    try {
      await signIn(operator.key);
    } catch (err) {
      return signInView(operator.key === "" && isUnauthenticated(err) ? "" : describeError(err));
    }
  }
  const [path = "/", query = ""] = (location.hash.slice(1) || "/").split("?");
  const main = shell();
  for (const [pattern, page] of routes) {
    const m = pattern.exec(path);
    if (m === null) continue;
    try {
      await page(m)(main, signal, new URLSearchParams(query));
    } catch (err) {
      if (!signal.aborted) showError(main, err);
    }
    return;
  }
  main.replaceChildren(h("p", {}, "Not found. ", h("a", { href: "#/" }, "Fleet")));
}

window.addEventListener("hashchange", () => void route());
void route();
