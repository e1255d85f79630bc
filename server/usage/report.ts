// Reading usage back: AdminService.GetUsage over the per-minute aggregates, grouped by key,
// deployment or time. The grouping is one of a closed set of SQL expressions, never caller text.
import { create } from "@bufbuild/protobuf";
import { durationFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { Prisma, type PrismaClient } from "../../gen/prisma/client.js";
import {
  GetUsageResponseSchema,
  UsageGrouping,
  UsageRowSchema,
  type AdminService,
  type GetUsageRequest,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { Clock } from "../../common/clock.js";
import { isUuid } from "../../common/x509.js";
import { whereIdOrName } from "../rpc/id-or-name.js";
import { ts } from "../rpc/convert.js";

/** Most rows one answer carries. */
export const maxUsageRows = 10_000;
const dayMs = 86_400_000;
/** The longest span one question may cover. */
const maxSpanMs = 400 * dayMs;

const groupSql: Record<UsageGrouping, Prisma.Sql> = {
  [UsageGrouping.UNSPECIFIED]: Prisma.raw(`"deploymentId"::text`),
  [UsageGrouping.KEY]: Prisma.raw(`"keyId"::text`),
  [UsageGrouping.DEPLOYMENT]: Prisma.raw(`"deploymentId"::text`),
  [UsageGrouping.MINUTE]: Prisma.raw(`"minute"`),
  [UsageGrouping.HOUR]: Prisma.raw(`date_trunc('hour', "minute", 'UTC')`),
  [UsageGrouping.DAY]: Prisma.raw(`date_trunc('day', "minute", 'UTC')`),
};
const byTime = (by: UsageGrouping) => by === UsageGrouping.MINUTE || by === UsageGrouping.HOUR || by === UsageGrouping.DAY;

interface Span {
  since: Date;
  until: Date;
}

/** Pure: the question's span, checked; default the last 24 hours. */
export function usageSpan(req: Pick<GetUsageRequest, "since" | "until">, now: number): Span {
  const until = req.until === undefined ? now : timestampMs(req.until);
  const since = req.since === undefined ? until - dayMs : timestampMs(req.since);
  if (since >= until) throw new ConnectError("since: must be before until", Code.InvalidArgument);
  if (until - since > maxSpanMs) throw new ConnectError("since: at most 400 days before until", Code.InvalidArgument);
  return { since: new Date(since), until: new Date(until) };
}

interface Grouped {
  g: string | Date;
  requests: bigint;
  failed: bigint;
  prompt: bigint;
  cached: bigint;
  completion: bigint;
  ttftSum: bigint;
  ttftCount: bigint;
  name: string | null;
}

export function adminUsage(prisma: PrismaClient, clock: Clock): Pick<ServiceImpl<typeof AdminService>, "getUsage"> {
  return {
    async getUsage(req) {
      const span = usageSpan(req, clock.now());
      if (req.keyId !== "" && !isUuid(req.keyId)) throw new ConnectError("key_id: a service key's id (a UUID)", Code.InvalidArgument);
      const deploymentId = req.deployment === "" ? undefined : await deploymentIdOf(prisma, req.deployment);
      const group = groupSql[req.by];
      const where = [
        Prisma.sql`u."minute" >= ${span.since} AND u."minute" < ${span.until}`,
        ...(req.keyId !== "" ? [Prisma.sql`u."keyId" = ${req.keyId.toLowerCase()}::uuid`] : []),
        ...(deploymentId !== undefined ? [Prisma.sql`u."deploymentId" = ${deploymentId}::uuid`] : []),
      ];
      const order = byTime(req.by) ? Prisma.raw("g ASC") : Prisma.raw("completion DESC, g ASC");
      const rows = await prisma.$queryRaw<Grouped[]>`
        SELECT ${group} AS g, sum(u."requests")::bigint AS requests,
          coalesce(sum(u."requests") FILTER (WHERE u."outcome" <> 'ok'), 0)::bigint AS failed,
          sum(u."promptTokens")::bigint AS prompt, sum(u."cachedPromptTokens")::bigint AS cached,
          sum(u."completionTokens")::bigint AS completion,
          sum(u."firstTokenMsSum")::bigint AS "ttftSum", sum(u."firstTokenCount")::bigint AS "ttftCount",
          max(d."name") AS name
        FROM "UsageMinute" u LEFT JOIN "Deployment" d ON d."id" = u."deploymentId"
        WHERE ${Prisma.join(where, " AND ")}
        GROUP BY g ORDER BY ${order} LIMIT ${maxUsageRows + 1}`;
      return create(GetUsageResponseSchema, {
        rows: rows.slice(0, maxUsageRows).map((r) => rowOf(r, req.by)),
        truncated: rows.length > maxUsageRows,
      });
    },
  };
}

async function deploymentIdOf(prisma: PrismaClient, idOrName: string): Promise<string> {
  const d = await prisma.deployment.findFirst({ where: whereIdOrName(idOrName), select: { id: true } });
  if (d === null) throw new ConnectError(`deployment ${idOrName} not found`, Code.NotFound);
  return d.id;
}

function rowOf(r: Grouped, by: UsageGrouping) {
  const grouped = by === UsageGrouping.KEY ? "key" : byTime(by) ? "time" : "deployment";
  return create(UsageRowSchema, {
    keyId: grouped === "key" ? String(r.g) : "",
    deploymentId: grouped === "deployment" ? String(r.g) : "",
    deploymentName: grouped === "deployment" ? (r.name ?? "") : "",
    start: grouped === "time" ? ts(r.g as Date) : undefined,
    requests: r.requests,
    failedRequests: r.failed,
    promptTokens: r.prompt,
    cachedPromptTokens: r.cached,
    completionTokens: r.completion,
    meanTimeToFirstToken: r.ttftCount > 0n ? durationFromMs(Number(r.ttftSum / r.ttftCount)) : undefined,
  });
}
