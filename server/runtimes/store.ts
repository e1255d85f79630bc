// Runtime profiles in the database. Immutable: a name once created keeps its content; creating it
// again with the same content is a no-op, with other content a conflict.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { PrismaClient, RuntimeProfile as ProfileRow } from "../../gen/prisma/client.js";
import { RuntimeProfileSpecSchema, type RuntimeProfileSpec } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { Clock } from "../../common/clock.js";
import { recordAudit, type AuditActor } from "../audit/audit.js";
import {
  checkProfileContent,
  checkProfileName,
  engineName,
  engineOfName,
  profileContentHash,
  ProfileRuleError,
  type ProfileContent,
} from "./profile.js";

export interface RuntimeProfilesDeps {
  prisma: PrismaClient;
  clock: Clock;
}

export interface ProfileInput extends ProfileContent {
  name: string;
}

export function specOf(row: ProfileRow): RuntimeProfileSpec {
  return create(RuntimeProfileSpecSchema, {
    engine: engineOfName(row.engine),
    contextSize: row.contextSize,
    threads: row.threads,
    contentHash: row.contentHash,
    memoryBytes: row.memoryBytes,
    gpuLayers: row.gpuLayers,
    gpuLayersAll: row.gpuLayersAll,
    gpuCount: row.gpuCount,
    gpuMemoryBytes: row.gpuMemoryBytes,
    gpuShared: row.gpuShared,
    parallel: row.parallel,
    batchSize: row.batchSize,
    embeddings: row.embeddings,
  });
}

const invalid = (err: unknown): never => {
  if (err instanceof ProfileRuleError) throw new ConnectError(err.message, Code.InvalidArgument);
  throw err;
};

export class RuntimeProfiles {
  constructor(private readonly deps: RuntimeProfilesDeps) {}

  async create(input: ProfileInput, correlationId: string, by: AuditActor): Promise<{ row: ProfileRow; created: boolean }> {
    try {
      checkProfileName(input.name);
      checkProfileContent(input);
    } catch (err) {
      invalid(err);
    }
    const contentHash = profileContentHash(input);
    const { prisma, clock } = this.deps;
    const now = new Date(clock.now());
    const same = (row: ProfileRow) => {
      if (row.contentHash === contentHash) return { row, created: false };
      throw new ConnectError(
        `runtime profile "${input.name}" exists with other content (${row.engine}, context ${row.contextSize}, threads ${row.threads}); profiles never change: create one under a new name`,
        Code.AlreadyExists,
      );
    };
    const existing = await prisma.runtimeProfile.findUnique({ where: { name: input.name } });
    if (existing !== null) return same(existing);
    const data = {
      name: input.name,
      engine: engineName(input.engine),
      contextSize: input.contextSize,
      threads: input.threads,
      memoryBytes: input.memoryBytes ?? 0n,
      gpuLayers: input.gpuLayers ?? 0,
      gpuLayersAll: input.gpuLayersAll ?? false,
      gpuCount: input.gpuCount ?? 0,
      gpuMemoryBytes: input.gpuMemoryBytes ?? 0n,
      gpuShared: input.gpuShared ?? false,
      parallel: input.parallel ?? 0,
      batchSize: input.batchSize ?? 0,
      embeddings: input.embeddings ?? false,
      contentHash,
      createdAt: now,
    };
    // Two operators racing on one name: the insert that loses sees the winner's row.
    const inserted = await prisma.$transaction(async (tx) => {
      const rows = await tx.runtimeProfile.createManyAndReturn({ data: [data], skipDuplicates: true });
      if (rows.length === 0) return undefined;
      await recordAudit(
        tx,
        {
          ...by,
          action: "runtime_profile.created",
          targetType: "runtime_profile",
          targetId: data.name,
          correlationId,
          details: { engine: data.engine, contextSize: String(data.contextSize), threads: String(data.threads), contentHash },
        },
        now,
      );
      return rows[0]!;
    });
    if (inserted !== undefined) return { row: inserted, created: true };
    return same((await prisma.runtimeProfile.findUnique({ where: { name: input.name } }))!);
  }

  list(offset: number, take: number): Promise<ProfileRow[]> {
    return this.deps.prisma.runtimeProfile.findMany({ orderBy: { name: "asc" }, skip: offset, take });
  }

  /** The resolved spec of a profile name, for a lease; undefined when no such profile exists. */
  async spec(name: string): Promise<RuntimeProfileSpec | undefined> {
    const row = await this.deps.prisma.runtimeProfile.findUnique({ where: { name } });
    return row === null ? undefined : specOf(row);
  }
}
