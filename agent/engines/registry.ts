// The runtimes this agent started, in a small file beside its state, so that an agent which died
// without stopping them (killed, crashed, host agent restarted) finds and stops them next time.
// A pid alone is not an identity: each entry also records the process's start time.
import { readIfExists, writeFileAtomic } from "../../common/files.js";

export interface RuntimeRecord {
  id: string;
  engine: string;
  pid: number;
  /** /proc/<pid>/stat starttime when it was started. */
  startTicks: number;
  modelPath: string;
  startedAt: string;
}

export class RuntimeRegistry {
  /** Writes one at a time, in call order, so the file is never a stale overwrite. */
  private writes: Promise<void> = Promise.resolve();

  constructor(readonly path: string) {}

  async read(): Promise<RuntimeRecord[]> {
    const text = await readIfExists(this.path);
    if (text === undefined) return [];
    try {
      const parsed = JSON.parse(text) as { runtimes?: unknown };
      return Array.isArray(parsed.runtimes) ? parsed.runtimes.filter(isRecord) : [];
    } catch {
      // A torn or foreign file cannot name processes to kill: treat it as empty.
      return [];
    }
  }

  add(record: RuntimeRecord): Promise<void> {
    return this.update((all) => [...all.filter((r) => r.id !== record.id), record]);
  }

  remove(id: string): Promise<void> {
    return this.update((all) => all.filter((r) => r.id !== id));
  }

  /** Keeps only the records `keep` accepts. */
  retain(keep: (r: RuntimeRecord) => boolean): Promise<void> {
    return this.update((all) => all.filter(keep));
  }

  private update(change: (all: RuntimeRecord[]) => RuntimeRecord[]): Promise<void> {
    const next = this.writes.then(async () => {
      const runtimes = change(await this.read());
      await writeFileAtomic(this.path, `${JSON.stringify({ runtimes }, null, 2)}\n`, 0o600);
    });
    this.writes = next.catch(() => undefined);
    return next;
  }
}

function isRecord(r: unknown): r is RuntimeRecord {
  const o = r as Partial<RuntimeRecord> | null;
  return (
    typeof o === "object" &&
    o !== null &&
    typeof o.id === "string" &&
    typeof o.engine === "string" &&
    Number.isSafeInteger(o.pid) &&
    (o.pid as number) > 1 &&
    Number.isSafeInteger(o.startTicks) &&
    typeof o.modelPath === "string" &&
    typeof o.startedAt === "string"
  );
}
