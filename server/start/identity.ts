// Who is who: the private CA and this server's certificate (before anything listens), the
// operators (break-glass keys, users through single sign-on), and the service keys that invoking callers present (once the database is open).
import type { Config } from "../config.js";
import type { Clock } from "../../common/clock.js";
import type { Logger } from "../observability/logger.js";
import type { PrismaClient } from "../../gen/prisma/client.js";
import { loadOrCreateCa, type Ca, type ServerCertificate } from "../identity/pki/ca.js";
import type { OperatorKeys } from "../identity/roles.js";
import { ServiceKeys } from "../identity/service-keys.js";
import { adminServiceKeys } from "../identity/service-keys-rpc.js";
import { serviceKeyInterceptor } from "../identity/service-keys-auth.js";
import type { OutageWatch } from "../db/availability.js";
import type { DirectQuery } from "../db/direct.js";
import type { ClusterBus } from "../cluster/bus.js";
import { OidcProvider } from "../identity/operators/oidc.js";
import { LiveOperatorCalls } from "../identity/operators/live-calls.js";
import { OperatorAuth } from "../identity/operators/authenticate.js";
import { adminAuthInterceptor } from "../identity/operators/interceptor.js";
import { adminOperators } from "../identity/operators/admin-rpc.js";
import { consoleSignIn } from "../identity/operators/console-sign-in.js";

export interface Identity {
  ca: Ca;
  tls: ServerCertificate;
  /** The break-glass keys; undefined when turned off (MODELFORGE_BREAK_GLASS=off). */
  operatorKeys: OperatorKeys | undefined;
}

export async function loadIdentity(
  config: Pick<Config, "certsDir" | "serverNames" | "operatorApiKey" | "operatorReadonlyKey" | "breakGlass">,
): Promise<Identity> {
  const ca = await loadOrCreateCa(config.certsDir);
  const tls = await ca.ensureServerCertificate(config.certsDir, config.serverNames);
  const operatorKeys = config.breakGlass ? { admin: config.operatorApiKey, readOnly: config.operatorReadonlyKey } : undefined;
  return { ca, tls, operatorKeys };
}

/**
 * Operators: single sign-on (when configured), users, personal tokens and console sessions; the
 * interceptor that authenticates every operator call, the console's /auth/ paths, and the RPCs.
 */
export function openOperators(deps: {
  config: Pick<Config, "sso" | "consoleSessionTtlMs" | "publicUrl" | "operatorApiKey" | "operatorReadonlyKey">;
  prisma: PrismaClient;
  clock: Clock;
  log: Logger;
  bus: Pick<ClusterBus, "publish">;
  breakGlass: OperatorKeys | undefined;
}) {
  const { config, prisma, clock, log } = deps;
  const oidc = config.sso !== undefined ? new OidcProvider(config.sso, clock) : undefined;
  if (oidc !== undefined && deps.breakGlass !== undefined && (config.operatorApiKey ?? config.operatorReadonlyKey) !== undefined) {
    log.warn(
      "break-glass operator keys are set beside single sign-on: every use is audited as break-glass; MODELFORGE_BREAK_GLASS=off refuses them",
    );
  }
  const live = new LiveOperatorCalls();
  const auth = new OperatorAuth({ prisma, clock, breakGlass: deps.breakGlass, oidc });
  return {
    live,
    interceptor: adminAuthInterceptor(auth, live),
    rpcs: adminOperators({ prisma, clock, bus: deps.bus, live }),
    signIn: consoleSignIn({
      prisma,
      clock,
      oidc,
      breakGlass: deps.breakGlass !== undefined,
      sessionTtlMs: config.consoleSessionTtlMs,
      publicUrl: config.publicUrl,
      log,
    }),
  };
}

/** Service keys: their admin RPCs and the interceptor that authenticates a service call. */
export function openServiceKeys(deps: {
  prisma: PrismaClient;
  direct: DirectQuery;
  clock: Clock;
  log: Logger;
  outage: OutageWatch;
  outageTrustMs: number;
}) {
  const { prisma, direct, clock, outage, outageTrustMs } = deps;
  const keys = new ServiceKeys({ prisma, direct, clock, outage, outageTrustMs });
  return {
    keys,
    rpcs: adminServiceKeys(keys),
    interceptor: serviceKeyInterceptor({ keys, log: deps.log, clock: deps.clock }),
  };
}
