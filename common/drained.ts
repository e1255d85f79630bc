// Waiting for a writable that refused more (its write returned false) to take more again.

/** What drained() needs of a stream: an HTTP response, an HTTP/2 stream. */
export interface Drainable {
  readonly destroyed: boolean;
  readonly writableEnded: boolean;
  once(event: "drain" | "close", listener: () => void): unknown;
  off(event: "drain" | "close", listener: () => void): unknown;
}

/** Resolves when `stream` can take more (true), or has closed (false). */
export function drained(stream: Drainable): Promise<boolean> {
  if (stream.destroyed || stream.writableEnded) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (more: boolean) => () => {
      stream.off("drain", onDrain);
      stream.off("close", onClose);
      resolve(more);
    };
    const onDrain = done(true);
    const onClose = done(false);
    stream.once("drain", onDrain);
    stream.once("close", onClose);
  });
}
