// One job with live progress (polled until it finishes), its result or failure, and cancel.
import { toJson } from "@bufbuild/protobuf";
import { JobState, type Job } from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { JobFailureCode, JobResultSchema, JobSpecSchema } from "../../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { admin, may, methods, pause } from "../api.js";
import { h, morph, section } from "../dom.js";
import { showError } from "../errors.js";
import { enumText, time } from "../format.js";

const pollMs = 1_000;
const finished = new Set([JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED]);

export function jobPage(jobId: string) {
  return async (main: HTMLElement, signal: AbortSignal): Promise<void> => {
    const body = h("div", {});
    main.replaceChildren(body);
    while (!signal.aborted) {
      const job = (await admin.getJob({ jobId }, { signal })).job!;
      morph(body, render(job, main));
      if (finished.has(job.state)) return;
      await pause(pollMs, signal);
    }
  };
}

function render(job: Job, main: HTMLElement): HTMLElement[] {
  const state = enumText(JobState, job.state);
  // The last progress report of a finished job is where it was, not where it ended.
  const percent = job.state === JobState.SUCCEEDED ? 100 : (job.progress?.percent ?? 0);
  const facts: [string, string | HTMLElement][] = [
    ["ID", job.id],
    ["Node", h("a", { href: `#/nodes/${job.nodeId}` }, job.nodeId)],
    ["Capability", job.capability],
    ["State", h("span", { class: `badge ${state}`, "data-testid": "job-state" }, state)],
    ["Attempt", `${job.attempt} of ${job.maxAttempts}`],
    ["Ordering key", job.orderingKey || "-"],
    ["Created", time(job.createdAt)],
    ["Lease expires", time(job.leaseExpiresAt)],
    ["Finished", time(job.finishedAt)],
    ["Cancel requested", job.cancelRequested ? "yes" : "no"],
  ];
  const cancel =
    may(methods.cancelJob) && !finished.has(job.state)
      ? h(
          "button",
          {
            type: "button",
            "data-testid": "cancel-job",
            onclick: () =>
              void admin.cancelJob({ jobId: job.id, reason: "cancelled from the console" }).catch((e: unknown) => showError(main, e)),
          },
          "Cancel job",
        )
      : null;
  return [
    h("h1", {}, `Job ${job.id.slice(0, 8)}`),
    h("div", { class: "controls" }, cancel),
    h("dl", { class: "facts" }, ...facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    section(
      "Progress",
      h("progress", { max: 100, value: percent, "data-testid": "job-progress" }),
      h("span", {}, ` ${percent.toFixed(0)}% ${job.progress?.message ?? ""}`),
    ),
    job.result
      ? section("Result", h("pre", { "data-testid": "job-result" }, JSON.stringify(toJson(JobResultSchema, job.result), null, 2)))
      : h("span", {}),
    job.failure
      ? section(
          "Failure",
          h(
            "p",
            { "data-testid": "job-failure" },
            `${enumText(JobFailureCode, job.failure.code)}: ${job.failure.message}${job.failure.retryable ? " (retryable)" : ""}`,
          ),
        )
      : h("span", {}),
    job.spec ? section("Spec", h("pre", {}, JSON.stringify(toJson(JobSpecSchema, job.spec), null, 2))) : h("span", {}),
  ];
}
