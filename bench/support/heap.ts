// A heap snapshot of the current process through node:inspector, reduced to bytes and counts per
// kind of object (constructor name for objects, function name for closures, else the V8 node
// type), so two of them can be compared: what each connected agent adds to the JavaScript heap.
import { Session } from "node:inspector";

export type HeapSummary = Record<string, { count: number; bytes: number }>;

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

export async function heapSummary(): Promise<HeapSummary> {
  const session = new Session();
  session.connect();
  const chunks: string[] = [];
  session.on("HeapProfiler.addHeapSnapshotChunk", (m) => chunks.push(m.params.chunk));
  await new Promise<void>((resolve, reject) =>
    session.post("HeapProfiler.takeHeapSnapshot", { reportProgress: false }, (err) => (err ? reject(err) : resolve())),
  );
  session.disconnect();
  const snap = JSON.parse(chunks.join("")) as Snapshot;
  chunks.length = 0;
  const fields = snap.snapshot.meta.node_fields;
  const types = snap.snapshot.meta.node_types[0];
  const width = fields.length;
  const fType = fields.indexOf("type");
  const fName = fields.indexOf("name");
  const fSize = fields.indexOf("self_size");
  const out: HeapSummary = {};
  for (let i = 0; i < snap.nodes.length; i += width) {
    const type = types[snap.nodes[i + fType]!]!;
    const name = snap.strings[snap.nodes[i + fName]!]!;
    let key: string;
    if (type === "object") key = name.length > 60 ? `${name.slice(0, 60)}…` : name;
    else if (type === "closure") key = `closure ${name || "(anonymous)"}`;
    else if (type === "native") key = `native ${name.slice(0, 60)}`;
    else key = `(${type})`;
    const e = out[key] ?? { count: 0, bytes: 0 };
    out[key] = e;
    e.count++;
    e.bytes += snap.nodes[i + fSize]!;
  }
  return out;
}

/** Rows of (loaded - baseline) / agents, largest first. */
export function heapDiff(baseline: HeapSummary, loaded: HeapSummary, agents: number, top = 30) {
  const rows = Object.entries(loaded).map(([k, v]) => ({
    kind: k,
    perAgentCount: (v.count - (baseline[k]?.count ?? 0)) / agents,
    perAgentBytes: (v.bytes - (baseline[k]?.bytes ?? 0)) / agents,
  }));
  const total = rows.reduce((a, r) => a + r.perAgentBytes, 0);
  return { totalPerAgentBytes: total, rows: rows.sort((a, b) => b.perAgentBytes - a.perAgentBytes).slice(0, top) };
}
