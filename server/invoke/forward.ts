// Forwarding an invoke to the replica that holds the serving node's Session. The forwarded call is
// the caller's own call, made again: the same service key (the holder authenticates and scopes it
// as if the caller had come straight to it, so forwarding grants nothing), the caller's deadline,
// its cancellation and its request id. A forwarded call carries the forwarding replica's id and is
// never forwarded again, so a stale holder record cannot make calls go round in circles. While the
// database is away, the holder last looked up is used (a wrong one refuses the call; it is never
// forwarded on).
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { SteadySessionManager, grpcTransport } from "../../common/http2-sessions.js";
import { DeploymentService } from "../../gen/proto/modelforge/deployment/v1/deployment_pb.js";
import type { Clock } from "../../common/clock.js";
import { LookupCache } from "../../common/lookup-cache.js";
import { onAbort } from "../../common/abort.js";
import { correlationHeader } from "../observability/correlation.js";
import { staleWhileDatabaseAway, type OutageWatch } from "../db/availability.js";
import type { ReplicaDirectory, SessionHolder } from "../cluster/replicas.js";
import type { AnswerPiece, InvokeCall, InvokeForwarder } from "./relay.js";
import { CallerStalled } from "./outbox.js";
import { limitHeader } from "../usage/limits.js";

/** Names the replica that forwarded a call; a call that carries it is served here or refused. */
export const forwardedFromHeader = "x-modelforge-forwarded-from";

export interface ReplicaForwarderDeps {
  directory: ReplicaDirectory;
  clock: Clock;
  /** This replica's id, sent with every forwarded call. */
  replicaId: string;
  /** The CA every replica's server certificate chains to (replicas share the certificates directory). */
  caPem: string;
  /** How long a holder lookup is reused (default 1 s). */
  holderCacheMs?: number;
  /** Knows whether the database is lost: holders are then answered from the cache without trying it. */
  outage?: OutageWatch;
}

export class ReplicaForwarder implements InvokeForwarder {
  private readonly clients = new Map<string, { client: Client<typeof DeploymentService>; sessions: SteadySessionManager }>();
  private readonly holders: LookupCache<SessionHolder | undefined>;

  constructor(private readonly deps: ReplicaForwarderDeps) {
    this.holders = new LookupCache(deps.clock, deps.holderCacheMs ?? 1_000, staleWhileDatabaseAway(Infinity, deps.outage));
  }

  holderOf(nodeIds: readonly string[]): Promise<SessionHolder | undefined> {
    return this.holders.get(nodeIds.join(","), () => this.deps.directory.holderOf(nodeIds));
  }

  async *forward(holder: SessionHolder, call: InvokeCall): AsyncGenerator<AnswerPiece> {
    const client = this.clientOf(holder.url);
    const stop = new AbortController();
    const forgetCaller = onAbort(call.signal, () => stop.abort(forwardCanceled));
    const request = {
      deploymentId: call.deployment,
      contentType: call.contentType,
      payload: call.payload,
      api: call.api,
      timeout: call.timeoutMs !== undefined ? durationFromMs(call.timeoutMs) : undefined,
    };
    const options = {
      headers: {
        authorization: call.credential ?? "",
        [forwardedFromHeader]: this.deps.replicaId,
        [correlationHeader]: call.requestId,
      },
      signal: stop.signal,
      timeoutMs: call.timeoutMs,
    };
    try {
      if (call.stream) {
        let revision = 0n;
        let replica = 0;
        for await (const piece of client.invokeStream(request, options)) {
          if (piece.revision !== 0n) [revision, replica] = [piece.revision, piece.replica];
          try {
            yield { payload: piece.payload, contentType: piece.contentType, revision, replica };
          } catch (err) {
            // The relay ends the request (its caller stopped reading): the holder hears a cancel,
            // not the internal error an abort without a reason resets the stream with.
            stop.abort(forwardCanceled);
            throw err;
          }
        }
      } else {
        const answer = await client.invoke(request, options);
        yield { payload: answer.payload, contentType: answer.contentType, revision: answer.revision, replica: answer.replica };
      }
    } catch (err) {
      // Thrown in by the relay, not by the holder: the caller stopped reading.
      if (err instanceof CallerStalled) throw err;
      // The holder moved or died since the lookup: the next call looks again.
      this.holders.clear();
      throw forwardError(err, holder);
    } finally {
      forgetCaller();
    }
  }

  close(): void {
    for (const { sessions } of this.clients.values()) sessions.abort();
    this.clients.clear();
  }

  private clientOf(url: string): Client<typeof DeploymentService> {
    let entry = this.clients.get(url);
    if (entry === undefined) {
      // One HTTP/2 connection per replica, kept while in use; TLS verified against the shared CA
      // and the replica URL's host name, like any client of the control plane.
      const sessions = new SteadySessionManager(url, { pingIntervalMs: 15_000, idleConnectionTimeoutMs: 60_000 }, { ca: this.deps.caPem });
      const transport = grpcTransport({ baseUrl: url, sessionManager: sessions });
      entry = { client: createClient(DeploymentService, transport), sessions };
      this.clients.set(url, entry);
    }
    return entry.client;
  }
}

/** Why a forwarded call is cancelled: its caller here went away or stopped reading. */
const forwardCanceled = new ConnectError("the caller went away", Code.Canceled);

/** The holder's own refusal passes through; failing to reach it at all says which replica. */
function forwardError(err: unknown, holder: SessionHolder): ConnectError {
  const e = ConnectError.from(err);
  if (e.code === Code.Unavailable && e.metadata.get("content-type") === null) {
    return new ConnectError(
      `the replica holding the node's session (${holder.replicaId} at ${holder.url}) is not reachable: ${e.rawMessage}`,
      Code.Unavailable,
    );
  }
  // A limit's refusal says when to come back and which limit it was, whichever replica answers.
  const passed = new Headers();
  for (const name of passedOn) {
    const value = e.metadata.get(name);
    if (value !== null) passed.set(name, value);
  }
  return new ConnectError(e.rawMessage, e.code, passed);
}

/** What of a holder's refusal reaches the caller besides its code and message. */
const passedOn = ["retry-after", limitHeader];
