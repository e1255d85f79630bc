// A small line chart as inline SVG: one or more series over the same samples, scaled to a fixed
// maximum (percent, degrees) so charts side by side compare.
import { h, svg } from "./dom.js";

export interface Series {
  name: string;
  values: number[];
}

const width = 240;
const height = 64;

export function lineChart(title: string, series: Series[], max: number, unit: string, testId: string, digits = 0): HTMLElement {
  const longest = Math.max(2, ...series.map((s) => s.values.length));
  const x = (i: number) => (i / (longest - 1)) * width;
  const y = (v: number) => height - (Math.min(Math.max(v, 0), max) / max) * height;
  const lines = series.map((s, n) => {
    // One sample is drawn as a flat line across, so the first value is visible at once.
    const points =
      s.values.length === 1
        ? [`0,${y(s.values[0]!).toFixed(1)}`, `${width},${y(s.values[0]!).toFixed(1)}`]
        : s.values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`);
    return svg("polyline", { class: `series series-${n % 4}`, fill: "none", points: points.join(" ") });
  });
  const latest = series
    .map((s) => `${s.name} ${s.values.length > 0 ? s.values[s.values.length - 1]!.toFixed(digits) : "-"}${unit}`)
    .join("  ");
  return h(
    "figure",
    { class: "chart", "data-testid": testId },
    svg(
      "svg",
      { viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": title },
      svg("rect", { class: "chart-bg", x: 0, y: 0, width, height }),
      ...lines,
    ),
    h("figcaption", {}, h("strong", {}, title), " ", latest),
  );
}
