// Enforcing service keys' limits across control-plane replicas: each key with limits has one row
// of spend (./limit-rules.ts decides), locked for the moment a request is admitted, so replicas on
// one PostgreSQL share exact counters. A request's reservation is settled with what it used when
// it ends, written at once and retried with the usage flush if the database was away. While the
// database cannot be reached, each replica admits from a local share of the limits (the limit
// divided by the replicas it knows of), and the usage ledger catches the tokens up afterwards.
import { Code, ConnectError } from "@connectrpc/connect";
import type { Prisma, PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import { isDatabaseUnavailable } from "../db/availability.js";
import {
  admit,
  hasLimits,
  refusalText,
  reservationOf,
  settle,
  type KeyLimits,
  type LimitedRequest,
  type LimitKind,
  type Spend,
} from "./limit-rules.js";

/** The header a refusal names its limit in, beside retry-after. */
export const limitHeader = "x-modelforge-limit";
/** The most completion tokens one request reserves (the llama.cpp runtime's own bound on max_tokens). */
const mostCompletion = 4096;

export interface LimitedKey {
  keyId: string;
  limits: KeyLimits;
}

/** A request admitted under its key's limits: settled with the tokens it used. */
export interface Charge {
  settle(usedTokens: number): void;
}

export interface KeyLimiterDeps {
  prisma: PrismaClient;
  clock: Clock;
  /** How many replicas share the limits (for the local share during an outage). */
  replicas: () => number;
}

interface Settlement {
  keyId: string;
  admittedAt: number;
  reserved: number;
  used: number;
}

export class KeyLimiter {
  private readonly local = new Map<string, Spend>();
  private pending: Settlement[] = [];
  private flushing: Promise<void> | undefined;

  constructor(private readonly deps: KeyLimiterDeps) {}

  /** Admits a request of `key`, or throws resource_exhausted naming the limit, with retry-after. No limits: nothing to charge. */
  async admit(key: LimitedKey, request: LimitedRequest): Promise<Charge | undefined> {
    if (!hasLimits(key.limits)) return undefined;
    const reserve = reservationOf(request, mostCompletion);
    const now = this.deps.clock.now();
    let outcome: ReturnType<typeof admit>;
    let shared = true;
    try {
      outcome = await this.admitShared(key, reserve, now);
    } catch (err) {
      if (!isDatabaseUnavailable(err)) throw err;
      shared = false;
      outcome = this.admitLocal(key, reserve, now);
    }
    if (!outcome.admitted) throw refusal(outcome.kind, outcome.retryAfterS, key.limits, reserve);
    return {
      settle: (used) => {
        if (!shared) this.local.set(key.keyId, settle(this.local.get(key.keyId), now, reserve, used, this.deps.clock.now()));
        else {
          this.pending.push({ keyId: key.keyId, admittedAt: now, reserved: reserve, used });
          void this.flush().catch(() => undefined);
        }
      },
    };
  }

  /** Writes the settlements not yet written; those that fail wait for the next flush. */
  flush(): Promise<void> {
    this.flushing ??= this.writeSettlements().finally(() => {
      this.flushing = undefined;
    });
    return this.flushing;
  }

  private async writeSettlements(): Promise<void> {
    while (this.pending.length > 0) {
      const next = this.pending[0]!;
      await this.deps.prisma.$transaction(async (tx) => {
        const spend = await lockedSpend(tx, next.keyId);
        if (spend === undefined) return;
        await writeSpend(tx, next.keyId, settle(spend, next.admittedAt, next.reserved, next.used, this.deps.clock.now()));
      });
      this.pending.shift();
    }
  }

  private admitShared(key: LimitedKey, reserve: number, now: number) {
    return this.deps.prisma.$transaction(async (tx) => {
      // The row is made once, by the key's first request (concurrent first ones: one insert wins).
      let spend = await lockedSpend(tx, key.keyId);
      if (spend === undefined) {
        await tx.$executeRaw`INSERT INTO "ServiceKeySpend" ("keyId", "minuteStart", "dayStart", "monthStart")
          VALUES (${key.keyId}::uuid, ${new Date(0)}, ${new Date(0)}, ${new Date(0)}) ON CONFLICT ("keyId") DO NOTHING`;
        spend = await lockedSpend(tx, key.keyId);
      }
      const outcome = admit(key.limits, spend, reserve, now);
      if (outcome.admitted) await writeSpend(tx, key.keyId, outcome.spend);
      return outcome;
    });
  }

  private admitLocal(key: LimitedKey, reserve: number, now: number) {
    const share = Math.max(1, this.deps.replicas());
    const part = (n: number | null) => (n === null ? null : Math.max(1, Math.floor(n / share)));
    const limits = {
      rpm: part(key.limits.rpm),
      tpm: part(key.limits.tpm),
      dailyTokens: part(key.limits.dailyTokens),
      monthlyTokens: part(key.limits.monthlyTokens),
    };
    const outcome = admit(limits, this.local.get(key.keyId), reserve, now);
    if (outcome.admitted) this.local.set(key.keyId, outcome.spend);
    return outcome;
  }
}

type Tx = Prisma.TransactionClient;

interface SpendRow {
  minuteStart: Date;
  minuteRequests: number;
  minuteTokens: bigint;
  dayStart: Date;
  dayTokens: bigint;
  monthStart: Date;
  monthTokens: bigint;
}

async function lockedSpend(tx: Tx, keyId: string): Promise<Spend | undefined> {
  const [row] = await tx.$queryRaw<
    SpendRow[]
  >`SELECT "minuteStart", "minuteRequests", "minuteTokens", "dayStart", "dayTokens", "monthStart", "monthTokens"
    FROM "ServiceKeySpend" WHERE "keyId" = ${keyId}::uuid FOR UPDATE`;
  if (row === undefined) return undefined;
  return {
    minuteStart: row.minuteStart.getTime(),
    minuteRequests: row.minuteRequests,
    minuteTokens: Number(row.minuteTokens),
    dayStart: row.dayStart.getTime(),
    dayTokens: Number(row.dayTokens),
    monthStart: row.monthStart.getTime(),
    monthTokens: Number(row.monthTokens),
  };
}

async function writeSpend(tx: Tx, keyId: string, s: Spend): Promise<void> {
  await tx.$executeRaw`UPDATE "ServiceKeySpend" SET "minuteStart" = ${new Date(s.minuteStart)}, "minuteRequests" = ${s.minuteRequests},
    "minuteTokens" = ${s.minuteTokens}::bigint, "dayStart" = ${new Date(s.dayStart)}, "dayTokens" = ${s.dayTokens}::bigint,
    "monthStart" = ${new Date(s.monthStart)}, "monthTokens" = ${s.monthTokens}::bigint WHERE "keyId" = ${keyId}::uuid`;
}

function refusal(kind: LimitKind, retryAfterS: number, limits: KeyLimits, reserved: number): ConnectError {
  return new ConnectError(
    refusalText(kind, limits, reserved),
    Code.ResourceExhausted,
    new Headers({ "retry-after": String(Math.max(1, retryAfterS)), [limitHeader]: kind }),
  );
}
