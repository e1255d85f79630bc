// Who is who: the private CA and this server's certificate (before anything listens), the
// operator keys, and the service keys that invoking callers present (once the database is open).
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

export interface Identity {
  ca: Ca;
  tls: ServerCertificate;
  operatorKeys: OperatorKeys;
}

export async function loadIdentity(config: Pick<Config, "certsDir" | "serverNames" | "operatorApiKey" | "operatorReadonlyKey">) {
  const ca = await loadOrCreateCa(config.certsDir);
  const tls = await ca.ensureServerCertificate(config.certsDir, config.serverNames);
  const operatorKeys = { admin: config.operatorApiKey, readOnly: config.operatorReadonlyKey };
  return { ca, tls, operatorKeys } satisfies Identity;
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
