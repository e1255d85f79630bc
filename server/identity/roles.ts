// Operator roles: viewer < operator < admin. Which roles may call a method is its contract option
// `(modelforge.common.v1.access)`, read from the generated descriptors, so the proto is the one
// place a method's access is written and this table the one place it is interpreted.
import { getOption, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { AdminService } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { Access, access } from "../../gen/proto/modelforge/common/v1/common_pb.js";
import { roleAtLeast, type OperatorRole } from "../operator-roles.js";

/** The configured break-glass keys; an undefined key means that role has no key (fails closed). */
export interface OperatorKeys {
  /** The admin role's key. */
  admin: string | undefined;
  /** The viewer role's key. */
  readOnly: string | undefined;
}

/** Who is calling, as far as authorization cares: a role, and whether a person (not a break-glass key) holds it. */
export interface Grant {
  role: OperatorRole;
  user: boolean;
}

/** Each method's declared access by name ("ListNodes"); an undeclared one is ACCESS_UNSPECIFIED. */
export function accessTable(service: DescService): ReadonlyMap<string, Access> {
  return new Map(service.methods.map((m) => [m.name, getOption(m, access)]));
}

const adminAccess = accessTable(AdminService);

/** The least role an access needs; undefined for ACCESS_SELF, which needs a user of any role. */
export function leastRoleFor(access: Access | undefined): OperatorRole | undefined {
  switch (access) {
    case Access.READ:
      return "viewer";
    case Access.OPERATE:
      return "operator";
    case Access.SELF:
      return undefined;
    default:
      // ACCESS_WRITE, and anything undeclared: fail closed to the highest role.
      return "admin";
  }
}

/** Whether a grant may call a method of this access. */
export function mayCall(grant: Grant, access: Access | undefined): boolean {
  const least = leastRoleFor(access);
  return least === undefined ? grant.user : roleAtLeast(grant.role, least);
}

function refusal(grant: Grant, name: string, access: Access | undefined): ConnectError {
  const least = leastRoleFor(access);
  if (least === undefined) {
    return new ConnectError(
      `permission denied: ${name} acts on the caller's own identity and needs a signed-in user, not a break-glass key`,
      Code.PermissionDenied,
    );
  }
  const what = least === "admin" ? "changes identity or fleet membership" : "changes state";
  return new ConnectError(
    `permission denied: ${name} ${what} and needs the ${least} role; the caller is ${grant.role}`,
    Code.PermissionDenied,
  );
}

export function authorize(grant: Grant, method: Pick<DescMethod, "name">): void {
  const declared = adminAccess.get(method.name);
  if (!mayCall(grant, declared)) throw refusal(grant, method.name, declared);
}

/** The same decision from a request path ("/modelforge.admin.v1.AdminService/ListNodes"), at the edge. */
export function authorizePath(grant: Grant, path: string): void {
  const name = path.slice(path.lastIndexOf("/") + 1);
  // An unknown method is not ours to refuse: the adapter answers it without reading the body.
  if (adminAccess.has(name)) authorize(grant, { name });
}
