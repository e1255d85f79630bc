// What a session reports besides heartbeats: telemetry at its interval, and inventory when it
// changed or its own, longer interval has passed (the server's view of the hardware never goes
// stale for long, and an unchanged inventory is not sent every round). Each report carries the
// next sequence of its stream from the state file.
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { Clock } from "../../common/clock.js";
import { collectInventory, inventoryFingerprint } from "../collectors/inventory.js";
import { collectTelemetry } from "../collectors/telemetry.js";
import type { StateStore } from "../state.js";
import type { ReplyResult, SessionMessage } from "./link.js";

/** Where the reports come from (the agent's collectors by default). */
export interface Reporters {
  inventory(): ReturnType<typeof collectInventory>;
  telemetry(): ReturnType<typeof collectTelemetry>;
}

export const agentReporters: Reporters = { inventory: () => collectInventory(), telemetry: () => collectTelemetry() };

export interface ReportDeps {
  reporters: Reporters;
  store: StateStore;
  clock: Clock;
  /** Sends one report; undefined when it was refused or not delivered. */
  publish(method: string, message: SessionMessage): Promise<ReplyResult | undefined>;
  /** The inventory interval the server set, read at each round (a config push may change it). */
  inventoryMs(): number;
}

/** One session's reports: what it last sent of the inventory is forgotten with it. */
export class SessionReports {
  private lastInventory = "";
  private lastInventoryAt = 0;

  constructor(private readonly deps: ReportDeps) {}

  /** Sends the inventory if it changed or is due, or always when `force`d (the session's first). */
  async inventory(force: boolean): Promise<void> {
    const { reporters, store, clock } = this.deps;
    const inv = await reporters.inventory();
    const fp = inventoryFingerprint(inv);
    const due = clock.now() - this.lastInventoryAt >= this.deps.inventoryMs();
    if (!force && !due && fp === this.lastInventory) return;
    const sequence = await store.nextSequence("inventory");
    const accepted = await this.deps.publish("PutInventory", {
      case: "inventory",
      value: { report: { sequence, observedAt: timestampFromMs(clock.now()), ...inv } },
    });
    if (accepted !== undefined) {
      this.lastInventory = fp;
      this.lastInventoryAt = clock.now();
    }
  }

  async telemetry(): Promise<void> {
    const { reporters, store, clock } = this.deps;
    const telemetry = await reporters.telemetry();
    const sequence = await store.nextSequence("telemetry");
    await this.deps.publish("PutTelemetry", {
      case: "telemetry",
      value: { report: { sequence, observedAt: timestampFromMs(clock.now()), telemetry } },
    });
  }

  /** One round: telemetry, then the inventory if it is due. */
  async round(): Promise<void> {
    await this.telemetry();
    await this.inventory(false);
  }
}
