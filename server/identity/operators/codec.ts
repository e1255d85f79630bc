// Operators' records in the contract's shapes.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  OperatorRole as RoleProto,
  PersonalTokenSchema,
  UserRefSchema,
  UserSchema,
} from "../../../gen/proto/modelforge/admin/v1/admin_pb.js";
import type { PersonalToken, User } from "../../../gen/prisma/client.js";
import { ts } from "../../rpc/convert.js";
import { isOperatorRole, type OperatorRole } from "../../operator-roles.js";

const toProto: Record<OperatorRole, RoleProto> = { viewer: RoleProto.READ_ONLY, operator: RoleProto.OPERATOR, admin: RoleProto.ADMIN };

export const roleToProto = (role: string): RoleProto => (isOperatorRole(role) ? toProto[role] : RoleProto.UNSPECIFIED);

/** A requested role; UNSPECIFIED is "none asked". */
export function roleFromProto(role: RoleProto): OperatorRole | undefined {
  if (role === RoleProto.UNSPECIFIED) return undefined;
  const found = (Object.keys(toProto) as OperatorRole[]).find((r) => toProto[r] === role);
  if (found === undefined) throw new ConnectError(`role: unknown role ${role}`, Code.InvalidArgument);
  return found;
}

export const userToProto = (u: User) =>
  create(UserSchema, {
    id: u.id,
    issuer: u.issuer,
    subject: u.subject,
    email: u.email,
    name: u.name,
    role: roleToProto(u.role),
    createdAt: ts(u.createdAt),
    lastSignInAt: ts(u.lastSignInAt),
    deactivatedAt: ts(u.deactivatedAt),
  });

export const userRefToProto = (u: Pick<User, "id" | "email">) => create(UserRefSchema, { id: u.id, email: u.email });

export const tokenToProto = (t: PersonalToken) =>
  create(PersonalTokenSchema, {
    id: t.id,
    name: t.name,
    prefix: t.prefix,
    role: roleToProto(t.role),
    createdAt: ts(t.createdAt),
    expiresAt: ts(t.expiresAt),
    revokedAt: ts(t.revokedAt),
    lastUsedAt: ts(t.lastUsedAt),
  });
