// The answer pieces between the relay, which takes them from the node as they come, and the caller's
// transport, which takes them as fast as its client reads. The request never waits on its caller:
// what the caller has not read yet is held here, bounded in bytes, and a caller that falls further
// behind than the bound has stalled (the relay then ends its request). Pure: no I/O, no timers.
import { Code, ConnectError } from "@connectrpc/connect";
import { AsyncQueue } from "../../common/queue.js";

/** Pieces for one caller, holding at most `maxUnreadBytes` of payload it has not read. */
export function outboxOf<T extends { payload: Uint8Array }>(maxUnreadBytes: number): AsyncQueue<T> {
  return new AsyncQueue<T>({ max: maxUnreadBytes, weigh: (piece) => piece.payload.byteLength });
}

/** The outcome a request is counted as when its caller stopped reading. */
export const callerStalledOutcome = "client_stalled";

/**
 * A caller left more answer unread than the bound: its request ends, counted as client_stalled,
 * and the caller (should it read again) gets `refusal`. Not a ConnectError itself: ConnectError's
 * `instanceof` matches any ConnectError by its shape, so a subclass could not be told apart.
 */
export class CallerStalled extends Error {
  readonly refusal: ConnectError;
  constructor(unreadBytes: number) {
    super(`the caller left ${unreadBytes} bytes of the answer unread: the request was ended`);
    this.refusal = new ConnectError(this.message, Code.ResourceExhausted);
  }
}
