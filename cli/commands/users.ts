// forge users list | deactivate | reactivate
import {
  DeactivateUserResponseSchema,
  ListUsersResponseSchema,
  ReactivateUserResponseSchema,
  type User,
} from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { command, idArg, type Group } from "../args.js";
import { dateOf, formatAge, table } from "../format.js";
import { printReply } from "../output.js";
import { pagedListCommand } from "../list.js";
import { roleName } from "./sign-in.js";

/** The user table. Pure. */
function userTable(users: User[], now: Date): string {
  return table(
    ["ID", "EMAIL", "NAME", "ROLE", "STATE", "LAST SIGN-IN", "SINCE"],
    users.map((u) => [
      u.id,
      u.email,
      u.name,
      roleName(u.role),
      u.deactivatedAt ? "deactivated" : "active",
      formatAge(dateOf(u.lastSignInAt), now),
      formatAge(dateOf(u.createdAt), now),
    ]),
  );
}

const listCommand = pagedListCommand("List the users who have signed in, newest first", {
  schema: ListUsersResponseSchema,
  fetch: (client, page) => client.listUsers(page),
  empty: "No users have signed in yet.\n",
  table: userTable,
});

const deactivateCommand = command("deactivate ID", "Deactivate a user at once, on every replica: sessions, tokens and streams refused", {
  notes: "Their console sessions end and their personal tokens are revoked for good; reactivate lets them sign in again.",
  async run(ctx, _values, positionals) {
    const res = await ctx.client().deactivateUser({ id: idArg(positionals, "user ID") });
    return printReply(ctx, DeactivateUserResponseSchema, res, ({ user }) => `User ${user?.email} deactivated.\n`);
  },
});

const reactivateCommand = command("reactivate ID", "Let a deactivated user sign in again", {
  async run(ctx, _values, positionals) {
    const res = await ctx.client().reactivateUser({ id: idArg(positionals, "user ID") });
    return printReply(ctx, ReactivateUserResponseSchema, res, ({ user }) => `User ${user?.email} reactivated.\n`);
  },
});

export const usersGroup: Group = {
  name: "users",
  summary: "Operators who sign in through the identity provider",
  topic: "users",
  commands: [listCommand, deactivateCommand, reactivateCommand],
};
