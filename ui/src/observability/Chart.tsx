// A uPlot chart that follows its container's width (uPlot draws on a canvas; see ui/README.md).
import { useEffect, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

export type ChartSeries = { label: string; color: string; kind: "bars" | "line"; unit?: string };

function cssVar(name: string, fallback: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
}

/** `x`: unix seconds; `ys`: one array per series (null: no value in that bucket). */
export function TimeChart(props: {
  title: string;
  x: number[];
  ys: (number | null)[][];
  series: ChartSeries[];
  height?: number;
  yLabel?: string;
}) {
  const box = useRef<HTMLDivElement>(null);
  const { title, x, ys, series, height = 200, yLabel } = props;

  useEffect(() => {
    const element = box.current;
    if (!element) return;
    const axisColor = cssVar("--muted", "#5d6270");
    const gridColor = cssVar("--border", "#d9dbe0");
    const axis = { stroke: axisColor, grid: { stroke: gridColor, width: 1 }, ticks: { stroke: gridColor, width: 1 } };
    const bars = uPlot.paths.bars ? uPlot.paths.bars({ size: [0.7, 40] }) : undefined;
    const options: uPlot.Options = {
      width: Math.max(element.clientWidth, 200),
      height,
      legend: { show: true },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true } },
      axes: [axis, { ...axis, label: yLabel, size: 56 }],
      series: [
        {},
        ...series.map((s) => ({
          label: s.label,
          stroke: s.color,
          width: s.kind === "bars" ? 1 : 2,
          fill: s.kind === "bars" ? `${s.color}99` : undefined,
          paths: s.kind === "bars" ? bars : undefined,
          points: { show: s.kind === "line" },
          spanGaps: s.kind === "line",
          value: (_u: uPlot, v: number | null) => (v === null || v === undefined ? "—" : `${+v.toFixed(2)}${s.unit ?? ""}`),
        })),
      ],
    };
    const plot = new uPlot(options, [x, ...ys] as uPlot.AlignedData, element);
    const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(element.clientWidth, 200), height }));
    resize.observe(element);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
  }, [x, ys, series, height, yLabel]);

  return (
    <figure className="obs-chart">
      <figcaption>{title}</figcaption>
      <div ref={box} role="img" aria-label={title} />
    </figure>
  );
}
