// Scrapes a Prometheus endpoint over real HTTP and reads samples out of the text format.
export interface Scrape {
  text: string;
  /** The sample's value, or undefined when no series matches; `labels` must all match (others may exist). */
  value(name: string, labels?: Record<string, string>): number | undefined;
  /** The sum over every series of `name` whose labels match. */
  sum(name: string, labels?: Record<string, string>): number;
}

export async function scrape(url: string): Promise<Scrape> {
  const res = await fetch(url);
  if (res.status !== 200) throw new Error(`scrape of ${url} answered ${res.status}`);
  const text = await res.text();
  const samples = text
    .split("\n")
    .filter((l) => l !== "" && !l.startsWith("#"))
    .map((l) => {
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)/.exec(l);
      if (!m) throw new Error(`not a sample line: ${l}`);
      const labels: Record<string, string> = {};
      for (const [, k, v] of (m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[k!] = v!;
      return { name: m[1]!, labels, value: Number(m[3]) };
    });
  const matching = (name: string, labels: Record<string, string> = {}) =>
    samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  return {
    text,
    value: (name, labels) => matching(name, labels)[0]?.value,
    sum: (name, labels) => matching(name, labels).reduce((t, s) => t + s.value, 0),
  };
}
