// One session's outbound side: the messages the agent sends, numbered, and the replies they wait
// for. The server answers every message by its id and in order; what is still waiting when the
// session ends is refused as the session closing.
import { Code, ConnectError } from "@connectrpc/connect";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import type { Logger } from "pino";
import { SessionRequestSchema, type Reply, type SessionRequest } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { AsyncQueue } from "../../common/queue.js";
import { codeName } from "../../common/codes.js";
import { invokeAnswerRequest, type AnswerPiece } from "../deployments/invoke-answer.js";

export type SessionMessage = NonNullable<MessageInitShape<typeof SessionRequestSchema>["message"]>;
export type ReplyResult = Reply["result"];

/** Sends one message on the open session and resolves with the server's reply. */
export interface SessionLink {
  send(message: SessionMessage): Promise<ReplyResult>;
}

const closed = () => new ConnectError("session closed", Code.Unavailable);

export class Outbox implements SessionLink {
  /** What the session stream writes, in order. */
  readonly requests = new AsyncQueue<SessionRequest>();
  private readonly pending = new Map<bigint, { resolve(r: ReplyResult): void; reject(e: unknown): void }>();
  private nextId = 0n;

  send(message: SessionMessage): Promise<ReplyResult> {
    const messageId = ++this.nextId;
    return new Promise<ReplyResult>((resolve, reject) => {
      this.pending.set(messageId, { resolve, reject });
      if (!this.requests.push(create(SessionRequestSchema, { messageId, message }))) {
        this.pending.delete(messageId);
        reject(closed());
      }
    });
  }

  /**
   * Queues a relayed message (an invoke answer) numbered 0, which the server does not answer: an
   * acknowledgement per stream chunk cost both sides about a third of what relaying the chunk did
   * (bench/openai.ts, CPU per chunk). False when the session has closed.
   */
  tell(message: SessionMessage): boolean {
    return this.requests.push(create(SessionRequestSchema, { messageId: 0n, message }));
  }

  /** Queues one piece of an invoke's answer, told as tell() does. */
  tellAnswer(piece: AnswerPiece): boolean {
    return this.requests.push(invokeAnswerRequest(piece));
  }

  /** Queues a message no reply is awaited for (Hello: the server answers it with Welcome). */
  post(message: SessionMessage): void {
    this.requests.push(create(SessionRequestSchema, { messageId: ++this.nextId, message }));
  }

  /** Hands a reply to the message waiting for it. */
  answered(reply: Reply): void {
    const p = this.pending.get(reply.messageId);
    this.pending.delete(reply.messageId);
    p?.resolve(reply.result);
  }

  /** Ends the stream and refuses every reply still awaited. */
  close(): void {
    this.requests.end();
    for (const p of this.pending.values()) p.reject(closed());
    this.pending.clear();
  }
}

/**
 * Publishes one message and logs a refusal by status and method, never the body; undefined when
 * refused or not delivered (a failure after the session ended is not worth a line). `heard` sees
 * every answer, refusals included.
 */
export async function publish(
  link: SessionLink,
  log: Logger,
  ended: AbortSignal,
  method: string,
  message: SessionMessage,
  heard?: (result: ReplyResult) => void,
): Promise<ReplyResult | undefined> {
  try {
    const result = await link.send(message);
    heard?.(result);
    if (result.case === "error") {
      log.warn(
        { code: result.value.code, method, path: `/modelforge.agent.v1.AgentService/${method}`, reason: result.value.message },
        "publication refused",
      );
      return undefined;
    }
    return result;
  } catch (err) {
    if (!ended.aborted) log.warn({ code: codeName(ConnectError.from(err).code), method }, "publication failed");
    return undefined;
  }
}
