// The console's one client: AdminService over Connect from the browser (the same generated code the
// CLI uses), the operator key from session storage only, and what the key's role may call, read
// from each method's `(modelforge.common.v1.access)` option in the contract.
import { getOption, type DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { AdminService, OperatorRole } from "../../gen/proto/modelforge/admin/v1/admin_pb.js";
import { Access, access } from "../../gen/proto/modelforge/common/v1/common_pb.js";

const keyItem = "modelforge.operator-key";

/** The signed-in key and its role; the key lives in sessionStorage only (gone with the tab). */
export const operator = {
  key: sessionStorage.getItem(keyItem) ?? "",
  role: OperatorRole.UNSPECIFIED,
};

const auth: Interceptor = (next) => (req) => {
  if (operator.key !== "") req.header.set("x-modelforge-admin-token", operator.key);
  return next(req);
};

export const admin: Client<typeof AdminService> = createClient(
  AdminService,
  createConnectTransport({ baseUrl: location.origin, useBinaryFormat: true, interceptors: [auth] }),
);

/** Asks the server what the key may do; a refused key is forgotten. */
export async function signIn(key: string): Promise<void> {
  operator.key = key.trim();
  try {
    operator.role = (await admin.getOperatorRole({})).role;
    sessionStorage.setItem(keyItem, operator.key);
  } catch (err) {
    signOut();
    throw err;
  }
}

export function signOut(): void {
  operator.key = "";
  operator.role = OperatorRole.UNSPECIFIED;
  sessionStorage.removeItem(keyItem);
}

/** Whether the signed-in role may call a method: the rule the server enforces, from the same option. */
export function may(method: DescMethod): boolean {
  return operator.role === OperatorRole.ADMIN || (operator.role === OperatorRole.READ_ONLY && getOption(method, access) === Access.READ);
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
