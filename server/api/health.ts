// grpc.health.v1.Health: "" and each of our services report SERVING until shutdown begins.
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { EventEmitter, on } from "node:events";
import {
  type Health,
  HealthCheckResponseSchema,
  HealthCheckResponse_ServingStatus as Status,
} from "../../gen/proto/grpc/health/v1/health_pb.js";

export class HealthState {
  private serving = false;
  private ended = false;
  private readonly changes = new EventEmitter();
  constructor(private readonly services: readonly string[]) {
    this.changes.setMaxListeners(0);
  }
  setServing(): void {
    this.serving = true;
    this.changes.emit("change");
  }
  setNotServing(): void {
    this.serving = false;
    this.changes.emit("change");
  }
  /** Ends every Watch (at the end of a graceful stop): an open one would hold its connection for the whole grace. */
  endWatches(): void {
    this.ended = true;
    this.changes.emit("change");
  }
  statusOf(service: string): Status {
    if (service !== "" && !this.services.includes(service)) return Status.SERVICE_UNKNOWN;
    return this.serving ? Status.SERVING : Status.NOT_SERVING;
  }
  get watchesEnded(): boolean {
    return this.ended;
  }
  onChange(signal: AbortSignal): AsyncIterable<unknown> {
    return on(this.changes, "change", { signal });
  }
}

export function healthService(state: HealthState): ServiceImpl<typeof Health> {
  return {
    check(req) {
      const status = state.statusOf(req.service);
      if (status === Status.SERVICE_UNKNOWN) throw new ConnectError(`unknown service "${req.service}"`, Code.NotFound);
      return create(HealthCheckResponseSchema, { status });
    },
    async *watch(req, ctx) {
      let last = state.statusOf(req.service);
      yield create(HealthCheckResponseSchema, { status: last });
      if (state.watchesEnded) return;
      try {
        for await (const _ of state.onChange(ctx.signal)) {
          if (state.watchesEnded) return;
          const now = state.statusOf(req.service);
          if (now !== last) {
            last = now;
            yield create(HealthCheckResponseSchema, { status: now });
          }
        }
      } catch (err) {
        if (!ctx.signal.aborted) throw err;
      }
    },
  };
}
