// The operator API: its own RPCs (enrollment tokens, nodes, audit) and those each subsystem brings.
import type { ServiceImpl } from "@connectrpc/connect";
import { publicUrlOf, type Config } from "../config.js";
import type { Clock } from "../../common/clock.js";
import type { Database } from "../db/client.js";
import type { Ca } from "../identity/pki/ca.js";
import { adminService } from "../api/admin.js";
import type { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { Sessions } from "./sessions.js";

export interface AdminDeps {
  config: Pick<Config, "enrollmentTokenTtlMs" | "reconcileIntervalMs" | "minAgentVersion" | "publicUrl" | "serverNames">;
  clock: Clock;
  db: Database;
  ca: Ca;
  sessions: Sessions;
  /** The port this replica listens on, for join commands when no public URL is set. */
  port: number;
  replicaId: string;
  shutdown: AbortSignal;
}

export function adminApi(deps: AdminDeps, features: Parameters<typeof adminService>[1]): ServiceImpl<typeof AdminService> {
  const { config } = deps;
  return adminService(
    {
      prisma: deps.db.prisma,
      clock: deps.clock,
      sessions: deps.sessions.registry,
      liveness: deps.sessions.liveness,
      defaultTtlMs: config.enrollmentTokenTtlMs,
      join: { serverUrl: publicUrlOf(config, deps.port), caFingerprint: deps.ca.fingerprint },
      watchIntervalMs: config.reconcileIntervalMs,
      replicaId: deps.replicaId,
      minAgentVersion: config.minAgentVersion,
      shutdown: deps.shutdown,
    },
    features,
  );
}
