// The console's serving pages in a real browser (Debian's Chromium through playwright-core) against
// a real control plane and a real agent process serving the tiny GGUF in llama.cpp: create a
// deployment from the page and watch it READY, scale it (the second replica waits, with the reason
// no node fits), see its replicas, history and live runtime output; create a service key and see its
// secret once; invoke through the OpenAI API with it and see the usage figures and the key's last
// use move; and, with the read-only key, see every page with its actions disabled. Hostile text
// where the grammar allows it (a node's name, a key's scope, a selector label) must stay text.
// Screenshots go to MODELFORGE_SCREENSHOT_DIR (or a temporary directory, printed).
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import { Agent } from "undici";
import { EngineKind } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { writeTinyLlamaGguf } from "../../scripts/gguf.js";
import { startTestServer, testAdminKey, type TestServer } from "../support/server.js";
import { enrollTestNode, type TestNode } from "../support/node.js";
import type { AgentProcess } from "../support/process.js";
import { spawnServingAgent, storeArtifact } from "../support/serving.js";
import { openAiCompletion } from "../support/usage-load.js";
import { buildConsole, type ConsoleBrowser, openConsoleBrowser, readOnlyKey, requireChromium } from "../support/browser.js";

/** Markup that would run (or at least draw an image) if any page put it into innerHTML. */
const hostile = `<img src=x onerror="window.__pwned=1">`;
const commit = "d".repeat(40);

const work = mkdtempSync(join(tmpdir(), "mf-console-serving-"));
let ts: TestServer;
let node: TestNode;
let agent: AgentProcess | undefined;
let web: ConsoleBrowser;
let page: Page;
let dispatcher: Agent;
let secret = "";

beforeAll(async () => {
  requireChromium();
  const uiDir = join(work, "ui");
  const modelRoot = join(work, "models");
  mkdirSync(modelRoot);
  const modelPath = join(work, "tiny.gguf");
  const [model] = await Promise.all([writeTinyLlamaGguf(modelPath, { contextLength: 2048 }), buildConsole(uiDir)]);
  ts = await startTestServer({
    MODELFORGE_UI_DIR: uiDir,
    MODELFORGE_OPERATOR_READONLY_KEY: readOnlyKey,
    MODELFORGE_HEARTBEAT_INTERVAL: "200ms",
    MODELFORGE_APPROVED_ROOTS: modelRoot,
    MODELFORGE_USAGE_FLUSH: "200ms",
  });
  dispatcher = new Agent({ connect: { ca: ts.caPem } });
  // The node's name is an operator's free text: markup in it must stay text on every page.
  node = await enrollTestNode(ts, `gpu ${hostile}`);
  await ts.admin.createRuntimeProfile({ name: "tiny-cpu", engine: EngineKind.LLAMA_CPP, contextSize: 2048, threads: 1 });
  await storeArtifact(ts.admin, { repository: "acme/tiny", commit, path: "tiny.gguf" }, modelPath, model.sha256);
  agent = await spawnServingAgent(ts.admin, node, modelRoot);
  web = await openConsoleBrowser(ts.url, work, "serving");
  await web.context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: ts.url });
  page = web.page;
}, 180_000);

afterAll(async () => {
  await web?.close();
  await agent?.stop();
  await dispatcher?.close();
  await ts?.stop();
  rmSync(work, { recursive: true, force: true });
});

/** Markup in the page's text was never parsed: no image anywhere, the trap never sprung. */
async function expectNoMarkupRan(): Promise<void> {
  const found = await page.evaluate(() => ({ images: document.querySelectorAll("img").length, pwned: "__pwned" in window }));
  expect(found).toEqual({ images: 0, pwned: false });
}

/** A completion through the OpenAI API with the service key, as a client calls it. */
async function complete(prompt: string): Promise<void> {
  expect((await openAiCompletion(ts.url, dispatcher, secret, "web-tiny", prompt)).completionTokens).toBeGreaterThan(0);
}

async function confirm(action: string, question: RegExp): Promise<void> {
  await page.getByTestId(action).click();
  expect(await web.text("confirm-question")).toMatch(question);
  await page.getByTestId("confirm-yes").click();
  await page.getByTestId("action-done").waitFor();
}

describe("the serving pages with the admin key", { timeout: 150_000 }, () => {
  it("creates a deployment from the page and watches it become READY", async () => {
    await web.signIn(testAdminKey);
    await page.goto(`${ts.url}/ui/#/deployments`);
    await page.getByText("No deployments yet.").waitFor();
    await page.getByTestId("dep-name").fill("web-tiny");
    await page.getByTestId("dep-profile").selectOption("tiny-cpu");
    await page.getByTestId("dep-artifact").selectOption(`acme/tiny@${commit}`);
    await page.getByTestId("dep-node").selectOption(node.nodeId);
    await page.getByTestId("dep-submit").click();
    await page.waitForURL(/#\/deployments\/web-tiny$/);
    expect(await web.text("dep-title")).toBe("web-tiny");
    await web.until(
      "web-tiny READY, 1/1",
      async () => (await web.text("dep-state")) === "ready" && (await web.text("dep-ready")) === "1/1",
      90_000,
    );
    const replicas = page.getByTestId("replicas");
    expect(await replicas.locator("tbody tr").count()).toBe(1);
    // The node's name is shown, as text, and links to the node's page.
    const link = replicas.getByRole("link", { name: `gpu ${hostile}` });
    expect(await link.getAttribute("href")).toBe(`#/nodes/${node.nodeId}`);
    expect(await web.text("history")).toContain("ready");
    await page.getByTestId("dep-audit").getByText("deployment.created").waitFor();
    await expectNoMarkupRan();
    await web.shot("01-deployment-ready");

    await page.goto(`${ts.url}/ui/#/deployments`);
    await web.until(
      "the list shows web-tiny ready 1/1",
      async () => (await web.text("state-web-tiny")) === "ready" && (await web.text("ready-web-tiny")) === "1/1",
    );
    await expectNoMarkupRan();
    await web.shot("02-deployments");
  });

  it("scales it, each action confirmed in the page: the second replica waits with the reason no node fits", async () => {
    await page.getByRole("link", { name: "web-tiny" }).click();
    await page.getByTestId("scale-replicas").fill("2");
    // Cancel leaves it as it was.
    await page.getByTestId("action-scale").click();
    await page.getByTestId("confirm-no").click();
    expect(await page.getByTestId("confirm").count()).toBe(0);
    expect((await ts.admin.getDeployment({ deployment: "web-tiny" })).deployment!.desiredReplicas).toBe(1);

    await confirm("action-scale", /^Scale web-tiny to 2 replicas\?$/);
    await web.until(
      "1 of 2 ready, degraded",
      async () => (await web.text("dep-ready")) === "1/2" && (await web.text("dep-state")) === "degraded",
    );
    await web.until("a second, pending replica", async () => (await page.getByTestId("replicas").locator("tbody tr").count()) === 2);
    const pending = await page.getByTestId("replicas").locator("tbody tr").nth(1).textContent();
    expect(pending).toContain("pending");
    await web.shot("03-deployment-scaled");

    await page.getByTestId("scale-replicas").fill("1");
    await confirm("action-scale", /^Scale web-tiny to 1 replica\?$/);
    await web.until("back to 1/1 ready", async () => (await web.text("dep-ready")) === "1/1" && (await web.text("dep-state")) === "ready");
    // The scaling history names each change and who made it; autoscaling is off for a fixed count.
    expect(await web.text("dep-autoscaling")).toBe("off: a fixed count");
    await web.until("both scales in the history", async () => (await page.getByTestId("scaling").locator("tbody tr").count()) === 2);
    const latest = await page.getByTestId("scaling").locator("tbody tr").first().textContent();
    expect(latest).toMatch(/21break-glassset by the operator$/);
  });

  it("creates a service key and shows its secret once, with a copy button; markup in its scope is text", async () => {
    await page.goto(`${ts.url}/ui/#/keys`);
    await page.getByText("No service keys.").waitFor();
    await page.getByTestId("key-name-input").fill("web");
    await page.getByTestId("key-deployments-input").fill(`web-tiny, ${hostile}`);
    await page.getByTestId("key-rpm-input").fill("600");
    await page.getByTestId("key-daily-input").fill("100000");
    await page.getByTestId("key-submit").click();
    secret = await web.text("key-secret");
    expect(secret).toMatch(/^mfsk_[A-Za-z0-9_-]{43}$/);
    await page.getByTestId("copy-secret").click();
    await page.getByTestId("copy-status").getByText("Copied.").waitFor();
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(secret);
    const keys = page.getByTestId("keys");
    // The server keeps the scope sorted.
    await keys.getByText(`${hostile}, web-tiny`).waitFor();
    expect(await keys.textContent()).toContain("600 req/min, 100000 tokens/day");
    expect(await web.text("last-used-web")).toBe("never");
    await expectNoMarkupRan();
    await web.shot("04-key-created");

    // Leaving the page drops the secret: it is shown nowhere else.
    await page.goto(`${ts.url}/ui/#/usage`);
    await page.goto(`${ts.url}/ui/#/keys`);
    await page.getByTestId("keys").waitFor();
    expect(await page.getByTestId("key-secret").count()).toBe(0);
    expect(await page.content()).not.toContain(secret);

    // Revoke, confirmed in the page.
    await ts.admin.createServiceKey({ name: "spare", deployments: ["web-tiny"] });
    await page.goto(`${ts.url}/ui/#/usage`);
    await page.goto(`${ts.url}/ui/#/keys`);
    await page.getByTestId("revoke-spare").click();
    expect(await web.text("confirm-question")).toMatch(/^Revoke key spare \(mfsk_/);
    await page.getByTestId("confirm-yes").click();
    await web.until("spare revoked", async () => (await page.getByTestId("revoke-spare").count()) === 0);
    expect((await ts.admin.listServiceKeys({ includeRevoked: true })).keys.find((k) => k.name === "spare")?.revokedAt).toBeDefined();
  });

  it("invokes through the OpenAI API with the key: the usage page's figures and chart move, the runtime's output shows it", async () => {
    await page.goto(`${ts.url}/ui/#/usage?range=1h`);
    await page.getByTestId("usage-requests").waitFor();
    expect(await web.text("usage-requests")).toBe("0");
    const flat = await page.getByTestId("chart-usage-requests").locator("polyline").first().getAttribute("points");
    const minuteNow = () => Math.floor(Date.now() / 60_000);
    const sent = [minuteNow()];
    await complete("The quick brown fox");
    await complete("Hello");
    sent.push(minuteNow());
    await web.until("two requests counted", async () => (await web.text("usage-requests")) === "2");
    expect(Number(await web.text("usage-tokens"))).toBeGreaterThan(0);
    const moved = await page.getByTestId("chart-usage-requests").locator("polyline").first().getAttribute("points");
    expect(moved).not.toBe(flat);
    await page.getByTestId("usage-deployments").getByText("web-tiny").waitFor();
    await page.getByTestId("usage-keys").getByText("web").waitFor();
    // The share of prompt tokens served from the runtime's cache, beside the counts.
    await page.getByTestId("usage-deployments").getByText("Cached share").waitFor();
    const row = page.getByTestId("usage-deployments").locator("tr", { hasText: "web-tiny" });
    expect(await row.locator("td").nth(5).textContent()).toMatch(/^\d{1,3}\.\d %$/);
    const href = (await page.getByTestId("usage-csv").getAttribute("href")) ?? "";
    expect(href.startsWith("data:text/csv;charset=utf-8,")).toBe(true);
    const csv = decodeURIComponent(href.slice(href.indexOf(",") + 1));
    expect(csv).toMatch(/^group,id,name,requests,/);
    expect(csv).toMatch(/\r\ndeployment,[0-9a-f-]{36},web-tiny,2,0,\d+,\d+,/);
    expect(csv).toMatch(/\r\nkey,[0-9a-f-]{36},web,2,0,/);
    await web.shot("05-usage");

    // The key's last use, written by the flush that counted them: to the minute, the UTC minute on hover.
    await page.goto(`${ts.url}/ui/#/keys`);
    const lastUse = page.getByTestId("last-used-web");
    expect(await lastUse.textContent()).toMatch(/^(this minute|\d+m ago)$/);
    const minute = Date.parse((await lastUse.getAttribute("title"))!.replace(" ", "T"));
    expect(minute % 60_000).toBe(0);
    expect(Date.now() - minute).toBeLessThan(5 * 60_000);
    await web.shot("05b-key-last-used");

    // One key's usage, from its row on the keys page, read against its limits.
    await page
      .getByTestId("keys")
      .locator("tr", { has: page.getByTestId("key-web") })
      .getByRole("link", { name: "2" })
      .click();
    await page.waitForURL(/#\/usage\?key=[0-9a-f-]{36}$/);
    expect(await web.text("usage-limits")).toBe("Key web: limits 600 req/min, 100000 tokens/day.");
    await web.until("the key's two requests", async () => (await web.text("usage-requests")) === "2");
    // Against its daily quota: the tokens the two used, of 100,000.
    const tokens = Number(await web.text("usage-tokens"));
    expect(await web.text("quota-day")).toBe(`Tokens today: ${tokens.toLocaleString("en-US")} of 100,000 (0 %)`);
    expect(await page.getByTestId("quota-day").locator("meter").getAttribute("value")).toBe(String(tokens));
    expect(await page.getByTestId("quota-month").count()).toBe(0);

    await page.goto(`${ts.url}/ui/#/deployments/web-tiny`);
    await page.getByTestId("logs").getByText("prompt eval time").first().waitFor();
    // The chart's caption counts the current UTC minute's requests: both of them only while it is
    // still the minute they were sent in; once it has passed, none, and the line shows them earlier.
    await web.until("the last hour's requests chart shows them", async () => {
      const chart = page.getByTestId("chart-requests");
      const caption = (await chart.textContent()) ?? "";
      const now = minuteNow();
      if (sent[0] === now) return caption.includes("all 2");
      if (sent[1] === now) return caption.includes("all 1") || caption.includes("all 2");
      const points = (await chart.locator("polyline").first().getAttribute("points")) ?? "";
      return caption.includes("all 0") && points.split(" ").some((p) => Number(p.split(",")[1]) < 64);
    });
    await web.shot("06-deployment-logs");
  });

  it("lists the stored artifacts with sizes, digests and estimated memory; creates a runtime profile", async () => {
    await page.goto(`${ts.url}/ui/#/artifacts`);
    const files = page.getByTestId(`files-acme/tiny@${commit}`);
    await files.getByText("tiny.gguf").waitFor();
    const row = (await files.locator("tbody tr").first().textContent()) ?? "";
    const stored = (await ts.admin.listArtifactFiles({ repository: "acme/tiny" })).files[0]!;
    expect(row).toContain(stored.sha256.slice(0, 16));
    expect(row).toMatch(/KiB|MiB/);
    expect(stored.memoryEstimate).toBeDefined();
    await web.shot("07-artifacts");

    await page.goto(`${ts.url}/ui/#/runtimes`);
    await page.getByTestId("profiles").getByText("tiny-cpu").waitFor();
    await page.getByTestId("profile-name").fill("web-profile");
    await page.locator("input[name=contextSize]").fill("1024");
    await page.getByTestId("profile-submit").click();
    await page.getByTestId("profiles").getByText("web-profile").waitFor();
    expect((await ts.admin.listRuntimeProfiles({})).profiles.find((p) => p.name === "web-profile")?.spec?.contextSize).toBe(1024);
    // The CLI's bounds, checked before the call.
    await page.getByTestId("profile-name").fill("too-many-threads");
    await page.locator("input[name=threads]").fill("5000");
    await page.getByTestId("profile-submit").click();
    expect(await web.text("error")).toContain("threads: a whole number from 0 to 1024");
    await web.shot("08-runtimes");
  });

  it("moves the deployment to a new revision (the new profile), confirmed: it loads before the old one drains", async () => {
    await page.goto(`${ts.url}/ui/#/deployments/web-tiny`);
    await page.getByTestId("revision-profile").fill("web-profile");
    await page.getByTestId("action-revision").click();
    expect(await web.text("confirm-question")).toMatch(/^Move web-tiny to a new revision \(profile web-profile\)\?/);
    await page.getByTestId("confirm-yes").click();
    await page.getByTestId("action-done").waitFor();
    await web.until(
      "revision 2 serving alone",
      async () =>
        (await web.text("dep-revision")) === "2" &&
        (await web.text("dep-state")) === "ready" &&
        (await page.getByTestId("replicas").locator("tbody tr").count()) === 1,
      90_000,
    );
    expect(await page.getByTestId("replicas").locator("tbody tr").first().textContent()).toContain("ready");
    expect(await web.text("revisions")).toContain("web-profile");
    await web.shot("09-new-revision");
  });

  it("renders each page from a cold load (time to first render, printed)", async () => {
    for (const [hash, drawn] of [
      ["#/", "count-nodes"],
      ["#/deployments", "deployments"],
      ["#/deployments/web-tiny", "replicas"],
      ["#/keys", "keys"],
      ["#/usage", "usage-requests"],
    ]) {
      await page.goto("about:blank");
      await page.goto(`${ts.url}/ui/${hash}`);
      await page.getByTestId(drawn!).first().waitFor();
      const now = await page.evaluate(() => performance.now());
      // The paint entry is queued after the frame is presented, which on a busy machine can be
      // later than the element's appearance in the DOM: wait for it rather than read it once.
      await page.waitForFunction(() => performance.getEntriesByName("first-contentful-paint").length > 0, null, {
        timeout: 30_000,
      });
      const paint = await page.evaluate(() => performance.getEntriesByName("first-contentful-paint")[0]!.startTime);
      process.stdout.write(`console ${hash}: first contentful paint ${paint.toFixed(0)} ms, its data drawn by ${now.toFixed(0)} ms\n`);
      expect(paint).toBeGreaterThan(0);
    }
  });

  it("shows a selector label and a pending reason as text", async () => {
    await ts.admin.createDeployment({
      name: "held",
      selector: { zone: hostile },
      runtimeProfile: "tiny-cpu",
      repository: "acme/tiny",
      commit,
    });
    await page.goto(`${ts.url}/ui/#/deployments/held`);
    await web.until("held pending", async () => (await web.text("dep-state")) === "pending");
    await page.getByText(`zone=${hostile}`).first().waitFor();
    await page.goto(`${ts.url}/ui/#/deployments`);
    await page.getByTestId("state-held").waitFor();
    await expectNoMarkupRan();
  });
});

describe("the serving pages with the read-only key", { timeout: 60_000 }, () => {
  it("shows every page with its actions disabled and a note, and the server refuses a forced call", async () => {
    await page.getByRole("button", { name: "Sign out" }).click();
    await web.signIn(readOnlyKey);
    await page.goto(`${ts.url}/ui/#/deployments`);
    await page.getByTestId("deployments").waitFor();
    expect(await page.getByTestId("create-deployment").count()).toBe(0);
    await page.getByTestId("read-only-note").waitFor();

    await page.goto(`${ts.url}/ui/#/deployments/web-tiny`);
    await page.getByTestId("replicas").waitFor();
    await page.getByTestId("read-only-note").waitFor();
    for (const action of ["action-scale", "action-revision", "action-start", "action-drain", "action-unload", "action-delete"]) {
      expect(await page.getByTestId(action).isDisabled(), action).toBe(true);
    }
    await web.shot("10-read-only-deployment");

    await page.goto(`${ts.url}/ui/#/keys`);
    await page.getByTestId("keys").waitFor();
    await page.getByTestId("read-only-note").waitFor();
    expect(await page.getByTestId("key-submit").isDisabled()).toBe(true);
    expect(await page.getByTestId("revoke-web").isDisabled()).toBe(true);
    await web.shot("11-read-only-keys");

    await page.goto(`${ts.url}/ui/#/usage?range=1h`);
    await web.until("usage shown", async () => (await web.text("usage-requests")) === "2");

    await page.goto(`${ts.url}/ui/#/artifacts`);
    await page.getByTestId("artifacts").waitFor();
    expect(await page.getByRole("button", { name: "Delete commit" }).isDisabled()).toBe(true);
    await page.goto(`${ts.url}/ui/#/runtimes`);
    await page.getByTestId("profiles").waitFor();
    expect(await page.getByTestId("profile-submit").isDisabled()).toBe(true);

    const answer = await page.evaluate(async () => {
      const res = await fetch("/modelforge.admin.v1.AdminService/ScaleDeployment", {
        method: "POST",
        headers: { "content-type": "application/json", "x-modelforge-admin-token": Object.values(sessionStorage)[0] ?? "" },
        body: JSON.stringify({ deployment: "web-tiny", replicas: 3 }),
      });
      return res.status;
    });
    expect(answer).toBe(403);
    expect((await ts.admin.getDeployment({ deployment: "web-tiny" })).deployment!.desiredReplicas).toBe(1);
  });
});
