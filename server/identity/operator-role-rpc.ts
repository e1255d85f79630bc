// GetOperatorRole of modelforge.admin.v1.AdminService: which role the presented key holds, so a
// console can offer only what that role may do.
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { type AdminService, GetOperatorRoleResponseSchema, OperatorRole } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { operatorRoleIn } from "./admin-token.js";

export function adminOperatorRole(): Pick<ServiceImpl<typeof AdminService>, "getOperatorRole"> {
  return {
    async getOperatorRole(_req, ctx) {
      const role = operatorRoleIn(ctx) === "admin" ? OperatorRole.ADMIN : OperatorRole.READ_ONLY;
      return create(GetOperatorRoleResponseSchema, { role });
    },
  };
}
