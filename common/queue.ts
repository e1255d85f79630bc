// An async queue: producers push, one consumer iterates; `fail` ends iteration with an error
// (what was not taken yet is dropped), `end` ends it once the rest is taken; whichever comes first
// holds. Unbounded, or bounded
// by the weight of what the consumer has not taken yet (a stream's unread bytes, say): a push past
// the bound is refused, and the caller decides what a consumer that far behind means. An item
// pushed to a consumer already waiting for one counts as taken: several pushed in one turn (one
// read of a socket) do not make a reading consumer look behind.

export interface QueueBound<T> {
  /** The most weight left untaken; one item alone is always taken, however heavy. */
  max: number;
  weigh: (item: T) => number;
}

export class AsyncQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private untaken = 0;
  /** The first item is the one pushed to a consumer already waiting for it: as good as taken, so not weighed. */
  private handed = false;
  private waiter: (() => void) | undefined;
  private done = false;
  private error: unknown;
  private failed = false;

  constructor(private readonly bound?: QueueBound<T>) {}

  /** Adds an item; false once the queue has ended, or when the bound would be passed. */
  push(item: T): boolean {
    if (this.done) return false;
    if (this.bound !== undefined) {
      if (this.waiter !== undefined && this.items.length === 0) this.handed = true;
      else {
        const weight = this.bound.weigh(item);
        if (this.items.length > 0 && this.untaken + weight > this.bound.max) return false;
        this.untaken += weight;
      }
    }
    this.items.push(item);
    this.wake();
    return true;
  }
  end(): void {
    this.done = true;
    this.wake();
  }
  fail(error: unknown): void {
    if (this.done) return;
    this.error = error;
    this.failed = true;
    this.done = true;
    this.items.length = 0;
    this.untaken = 0;
    this.handed = false;
    this.wake();
  }
  get closed(): boolean {
    return this.done;
  }
  /** The weight of what the consumer has not taken yet (bounded queues). */
  get untakenWeight(): number {
    return this.untaken;
  }
  /** Whether the consumer waits for an item: it has taken everything so far. */
  get consumerWaiting(): boolean {
    return this.waiter !== undefined;
  }
  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }
  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      if (this.failed) throw this.error;
      if (this.items.length > 0) {
        const item = this.items.shift() as T;
        if (this.handed) this.handed = false;
        else if (this.bound !== undefined) this.untaken -= this.bound.weigh(item);
        yield item;
        continue;
      }
      if (this.done) return;
      await new Promise<void>((resolve) => {
        this.waiter = resolve;
      });
    }
  }
}
