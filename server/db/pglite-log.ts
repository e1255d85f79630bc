// PGlite writes its server log to the console; a failed start is explained by its last error
// line, which this keeps (bounded) instead of printing.
import { oneLine } from "./errors.js";

/** Keeps PGlite's recent server log lines to explain a failed start. */
export class ServerLog {
  private readonly lines: string[] = [];
  add = (text: string): boolean => {
    for (const line of text.split("\n")) {
      if (!line.trim()) continue;
      this.lines.push(line);
      if (this.lines.length > 50) this.lines.shift();
    }
    return false;
  };
  /** The last PANIC/FATAL/ERROR line with its DETAIL, without timestamp prefixes. */
  cause(): string | undefined {
    for (let i = this.lines.length - 1; i >= 0; i--) {
      const m = /\b(PANIC|FATAL|ERROR):\s+(.*)$/.exec(this.lines[i] ?? "");
      if (!m) continue;
      const detail = /\bDETAIL:\s+(.*)$/.exec(this.lines[i + 1] ?? "");
      return oneLine(`${m[2]}${detail ? ` (${detail[1]})` : ""}`).replace(/\s{2,}/g, " ");
    }
    return undefined;
  }
  has(pattern: RegExp): boolean {
    return this.lines.some((l) => pattern.test(l));
  }
}
