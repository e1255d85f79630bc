// modelforge.admin.v1.AdminService: every feature brings its own RPCs (its admin-rpc.ts); this
// puts them together. The caller is authenticated and authorized by the interceptor before any of them run.
import type { ServiceImpl } from "@connectrpc/connect";
import type { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { adminAudit } from "../audit/admin-rpc.js";
import { adminEnrollmentTokens } from "../identity/enrollment/admin-rpc.js";
import { adminNodes, type NodeAdminDeps } from "../nodes/admin-rpc.js";

/** What the RPCs built here work with. */
export type AdminServiceDeps = NodeAdminDeps;

function coreRpcs(deps: AdminServiceDeps) {
  return { ...adminEnrollmentTokens(deps), ...adminNodes(deps), ...adminAudit(deps.prisma) };
}

/** The RPCs of the features server/start/ builds (jobs, artifacts, runtime profiles, ...): together, exactly the rest. */
export type FeatureRpcs = Omit<ServiceImpl<typeof AdminService>, keyof ReturnType<typeof coreRpcs>>;

export function adminService(deps: AdminServiceDeps, features: FeatureRpcs): ServiceImpl<typeof AdminService> {
  return { ...coreRpcs(deps), ...features };
}
