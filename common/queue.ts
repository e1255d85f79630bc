// A minimal unbounded async queue: producers push, one consumer iterates; `fail` ends iteration
// with an error, `end` ends it cleanly. Used to merge server pushes into a stream's responses.
export class AsyncQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private waiter: (() => void) | undefined;
  private done = false;
  private error: unknown;

  push(item: T): boolean {
    if (this.done) return false;
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
    this.done = true;
    this.wake();
  }
  get closed(): boolean {
    return this.done;
  }
  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }
  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      if (this.error !== undefined) throw this.error;
      const item = this.items.shift();
      if (item !== undefined) {
        yield item;
        continue;
      }
      if (this.done) return;
      await new Promise<void>((resolve) => (this.waiter = resolve));
    }
  }
}
