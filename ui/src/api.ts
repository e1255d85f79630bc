// The console's one client: AdminService over Connect from the browser (the same generated code the
// CLI uses), signed in by single sign-on (an HttpOnly session cookie the browser sends by itself)
// or by a break-glass key kept in session storage only, and what the caller's role may call, read
// from each method's `(modelforge.common.v1.access)` option in the contract.
import { getOption, type DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { AdminService, OperatorRole } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { Access, access } from "../../gen/proto/modelforge/common/v1/common_pb.js";

const keyItem = "modelforge.operator-key";

/** Who is signed in: a user (SSO) or a break-glass key, which lives in sessionStorage only (gone with the tab). */
export const operator = {
  key: sessionStorage.getItem(keyItem) ?? "",
  role: OperatorRole.UNSPECIFIED,
  /** The signed-in user's name and email; empty for a break-glass key. */
  user: { name: "", email: "" },
};

/** What the server offers at /auth/config. */
export interface SignInOptions {
  sso: { issuer: string } | null;
  breakGlass: boolean;
}

export async function signInOptions(): Promise<SignInOptions> {
  const res = await fetch("/auth/config", { credentials: "same-origin" });
  if (!res.ok) return { sso: null, breakGlass: true };
  return (await res.json()) as SignInOptions;
}

const auth: Interceptor = (next) => (req) => {
  if (operator.key !== "") req.header.set("x-modelforge-admin-token", operator.key);
  return next(req);
};

export const admin: Client<typeof AdminService> = createClient(
  AdminService,
  createConnectTransport({ baseUrl: location.origin, useBinaryFormat: true, interceptors: [auth] }),
);

/** Asks the server who the caller is (the key given, else the session cookie); a refused key is forgotten. */
export async function signIn(key: string): Promise<void> {
  operator.key = key.trim();
  try {
    const me = await admin.getOperatorRole({});
    operator.role = me.role;
    operator.user = { name: me.user?.name ?? "", email: me.user?.email ?? "" };
    if (operator.key !== "") sessionStorage.setItem(keyItem, operator.key);
  } catch (err) {
    forget();
    throw err;
  }
}

function forget(): void {
  operator.key = "";
  operator.role = OperatorRole.UNSPECIFIED;
  operator.user = { name: "", email: "" };
  sessionStorage.removeItem(keyItem);
}

/** Forgets the key, and ends a single sign-on session at the server. */
export async function signOut(): Promise<void> {
  const sso = operator.user.email !== "" && operator.key === "";
  forget();
  if (sso) await fetch("/auth/logout", { method: "POST", headers: { "content-type": "application/json" }, credentials: "same-origin" });
}

/** The least role each access needs, as the server's table (server/identity/roles.ts) has it. */
const rank: Partial<Record<OperatorRole, number>> = { [OperatorRole.READ_ONLY]: 1, [OperatorRole.OPERATOR]: 2, [OperatorRole.ADMIN]: 3 };
const least: Partial<Record<Access, number>> = { [Access.READ]: 1, [Access.OPERATE]: 2, [Access.WRITE]: 3 };

/** Whether the signed-in role may call a method: the rule the server enforces, from the same option. */
export function may(method: DescMethod): boolean {
  const declared = getOption(method, access);
  if (declared === Access.SELF) return operator.user.email !== "";
  return (rank[operator.role] ?? 0) >= (least[declared] ?? 3);
}

export const methods = AdminService.method;

/** "[permission_denied] ..." for a failed call. */
export function describeError(err: unknown): string {
  const e = ConnectError.from(err);
  return `[${Code[e.code]?.replace(/[A-Z]/g, (c, i) => (i > 0 ? "_" : "") + c.toLowerCase()) ?? e.code}] ${e.rawMessage}`;
}

export function isUnauthenticated(err: unknown): boolean {
  return ConnectError.from(err).code === Code.Unauthenticated;
}

/** Waits `ms`, or less when the page is left. */
export function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}
