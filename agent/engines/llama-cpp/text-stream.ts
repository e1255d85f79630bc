// Turns the growing decoded text of a generation into deltas that are safe to send: a stop string
// ends the text before it, and nothing is sent that a later token could still change (the tail of
// an incomplete UTF-8 sequence, or the beginning of a stop string).

const incomplete = "\uFFFD";

export class TextStream {
  private sent = 0;
  private stoppedAt: number | undefined;

  constructor(private readonly stops: readonly string[]) {}

  /** `full` is the whole text generated so far; returns what may be sent now. */
  next(full: string): { delta: string; stopped: boolean } {
    const stop = this.firstStop(full);
    if (stop !== undefined) {
      this.stoppedAt = stop;
      return { delta: this.advance(full, stop), stopped: true };
    }
    let end = full.length;
    while (end > this.sent && full[end - 1] === incomplete) end--;
    end -= this.heldForStop(full.slice(0, end));
    return { delta: this.advance(full, end), stopped: false };
  }

  /** At the end of generation: everything not sent yet. */
  finish(full: string): string {
    return this.advance(full, this.stoppedAt ?? full.length);
  }

  /** The final text: the generation up to its stop string. */
  text(full: string): string {
    return full.slice(0, this.firstStop(full) ?? full.length);
  }

  private advance(full: string, end: number): string {
    if (end <= this.sent) return "";
    const delta = full.slice(this.sent, end);
    this.sent = end;
    return delta;
  }

  private firstStop(full: string): number | undefined {
    let first: number | undefined;
    for (const s of this.stops) {
      const at = full.indexOf(s);
      if (at >= 0 && (first === undefined || at < first)) first = at;
    }
    return first;
  }

  /** Length of the longest tail of `text` that begins some stop string. */
  private heldForStop(text: string): number {
    let held = 0;
    for (const s of this.stops) {
      for (let k = Math.min(s.length - 1, text.length - this.sent); k > held; k--) {
        if (text.endsWith(s.slice(0, k))) {
          held = k;
          break;
        }
      }
    }
    return held;
  }
}
