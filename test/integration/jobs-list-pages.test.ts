// ListJobs pages stay bounded in bytes as well as in count: a job carries its spec and result (an
// acquisition names up to a whole commit's files), so a page of large jobs ends early and the
// next page goes on from its last job. The page rule as a table, then the real RPC over jobs
// written straight to the database.
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, toBinary, toJson } from "@bufbuild/protobuf";
import { ListJobsResponseSchema } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { JobSpecSchema } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import { MAX_COMMIT_FILES } from "../../common/artifacts.js";
import { countWithin } from "../../server/rpc/paging.js";
import { MAX_LIST_PAGE_BYTES } from "../../server/jobs/admin-rpc.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { enrollTestNode } from "../support/node.js";

describe("countWithin", () => {
  it.each([
    [[], 10, 0],
    [[4, 4, 4], 10, 2],
    [[5, 5, 5], 10, 2],
    [[3, 3, 3], 10, 3],
    [[20, 1], 10, 1],
    [[1, 20], 10, 1],
  ])("sizes %j within %d bytes: %d", (sizes, max, count) => {
    expect(countWithin(sizes, max)).toBe(count);
  });
});

describe("ListJobs", () => {
  let ts: TestServer;
  beforeAll(async () => {
    ts = await startTestServer();
  }, 60_000);
  afterAll(async () => ts?.stop());

  it("pages jobs of whole-commit acquisitions within the byte bound, and every job comes once", async () => {
    const node = await enrollTestNode(ts);
    const spec = create(JobSpecSchema, {
      kind: {
        case: "artifactAcquire",
        value: {
          repository: "acme/sharded",
          commit: "c".repeat(40),
          targetRoot: "/srv/models",
          files: Array.from({ length: MAX_COMMIT_FILES }, (_, i) => ({
            path: `weights/model-${String(i).padStart(5, "0")}-of-01000.safetensors`,
            sizeBytes: 1n << 32n,
            sha256: "ab".repeat(32),
          })),
        },
      },
    });
    const jobBytes = toBinary(JobSpecSchema, spec).byteLength;
    const count = Math.ceil((2.5 * MAX_LIST_PAGE_BYTES) / jobBytes);
    const ids = Array.from({ length: count }, () => randomUUID());
    await ts.server.db.prisma.job.createMany({
      data: ids.map((id) => ({ id, nodeId: node.nodeId, capability: "artifact.acquire.v1", spec: toJson(JobSpecSchema, spec) as object })),
    });

    const seen: string[] = [];
    let pageToken = "";
    let pages = 0;
    do {
      const page = await ts.admin.listJobs({ nodeId: node.nodeId, pageSize: 1000, pageToken });
      expect(page.jobs.length).toBeGreaterThan(0);
      expect(toBinary(ListJobsResponseSchema, page).byteLength).toBeLessThanOrEqual(MAX_LIST_PAGE_BYTES + 1024);
      seen.push(...page.jobs.map((j) => j.id));
      pageToken = page.nextPageToken;
      pages++;
    } while (pageToken !== "");
    expect(pages).toBeGreaterThanOrEqual(3);
    expect([...seen].sort()).toEqual([...ids].sort());
  });
});
