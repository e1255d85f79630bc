// forge login | logout | whoami: operators signing in through the control plane's identity provider.
import { GetOperatorRoleResponseSchema, OperatorRole } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { command, type Context, type Group } from "../args.js";
import { ConfigError } from "../usage-error.js";
import { enumName, fields } from "../format.js";
import { printReply } from "../output.js";
import { fetchSignInConfig, signIn, signOut, storeLogin } from "../login.js";

/** The role as operators name it. */
export const roleName = (role: OperatorRole): string => (role === OperatorRole.READ_ONLY ? "viewer" : enumName(OperatorRole, role));

async function whoAmI(ctx: Context): Promise<number> {
  const res = await ctx.client().getOperatorRole({});
  return printReply(ctx, GetOperatorRoleResponseSchema, res, (r) =>
    fields([
      ["User", r.user ? `${r.user.name} <${r.user.email}>` : undefined],
      ["Role", roleName(r.role)],
      ["Signed in with", r.credential],
    ]),
  );
}

const loginCommand = command("", "Sign in through the identity provider (device code, else a browser redirect)", {
  interruptible: true,
  notes:
    "Prints where to confirm the sign-in, then waits. The ID token (and a refresh token, where the\n" +
    "provider gives one) is kept in ~/.config/modelforge/login.json (MODELFORGE_LOGIN_FILE), mode 0600,\n" +
    "and refreshed before it expires. forge logout forgets it.",
  async run(ctx) {
    const where = ctx.server();
    const config = await fetchSignInConfig(where.server, where.caPem, ctx.signal);
    if (config.sso === null) {
      throw new ConfigError(
        `${where.server} has no single sign-on configured: use a personal token (MODELFORGE_TOKEN) or the break-glass key`,
      );
    }
    const login = await signIn(config.sso, { say: (text) => ctx.err(text), signal: ctx.signal });
    storeLogin(ctx.env, where.server, login);
    ctx.err(`Signed in to ${where.server}.\n`);
    return whoAmI(ctx);
  },
});

const logoutCommand = command("", "Sign out: revoke the refresh token at the provider and forget the sign-in", {
  async run(ctx) {
    const where = ctx.server();
    const { signedIn, revoked } = await signOut(ctx.env, where.server);
    ctx.out(
      signedIn ? `Signed out of ${where.server}${revoked ? " (refresh token revoked)" : ""}.\n` : `Not signed in to ${where.server}.\n`,
    );
    return 0;
  },
});

const whoamiCommand = command("", "Who the CLI is signed in as, with which role", { run: whoAmI });

export const loginGroup: Group = { name: "login", summary: "Sign in", topic: "sign-in", commands: [loginCommand], defaultCommand: "" };
export const logoutGroup: Group = { name: "logout", summary: "Sign out", topic: "sign-out", commands: [logoutCommand], defaultCommand: "" };
export const whoamiGroup: Group = {
  name: "whoami",
  summary: "Who you are",
  topic: "who you are",
  commands: [whoamiCommand],
  defaultCommand: "",
};
