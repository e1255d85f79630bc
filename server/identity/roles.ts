// Operator roles. The admin key may call every operator RPC; the read-only key only those whose
// contract option `(modelforge.common.v1.access)` is ACCESS_READ. The table is read from the
// generated descriptors, so the proto is the one place a method's access is written.
import { getOption, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { Access, access } from "../../gen/proto/modelforge/common/v1/common_pb.js";

export type OperatorRole = "admin" | "read-only";

/** The configured operator keys; an undefined key means that role has no key (fails closed). */
export interface OperatorKeys {
  admin: string | undefined;
  readOnly: string | undefined;
}

/** Each method's declared access by name ("ListNodes"); an undeclared one is ACCESS_UNSPECIFIED. */
export function accessTable(service: DescService): ReadonlyMap<string, Access> {
  return new Map(service.methods.map((m) => [m.name, getOption(m, access)]));
}

const adminAccess = accessTable(AdminService);

/** Whether a role may call a method. Anything but a declared read is for the admin role only. */
export function mayCall(role: OperatorRole, access: Access | undefined): boolean {
  return role === "admin" || access === Access.READ;
}

export function authorize(role: OperatorRole, method: Pick<DescMethod, "name">): void {
  if (!mayCall(role, adminAccess.get(method.name))) {
    throw new ConnectError(
      `permission denied: ${method.name} changes state and needs the admin key, not a read-only key`,
      Code.PermissionDenied,
    );
  }
}

/** The same decision from a request path ("/modelforge.admin.v1.AdminService/ListNodes"), at the edge. */
export function authorizePath(role: OperatorRole, path: string): void {
  const name = path.slice(path.lastIndexOf("/") + 1);
  // An unknown method is not ours to refuse: the adapter answers it without reading the body.
  if (adminAccess.has(name)) authorize(role, { name });
}
