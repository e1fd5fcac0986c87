import { useMemo, useState } from "react";
import { messageOf, useLoad } from "../common/useLoad";
import type { ObservabilityHealthOut, OverviewOut } from "../api/types";
import { stamp } from "../common/stamp";
import { obsApi } from "./api";
import { TimeChart, type ChartSeries } from "./Chart";
import { tracesHref } from "./routes";
import { Table } from "./Table";
import { count, DEFAULT_WINDOW, ms, usd, windowParams, type Window } from "./time";
import { WindowPicker } from "./WindowPicker";

const TURN_SERIES: ChartSeries[] = [
  { label: "Turns", color: "#2f6fde", kind: "bars" },
  { label: "Failed", color: "#d23b2f", kind: "bars" },
];
const LATENCY_SERIES: ChartSeries[] = [
  { label: "p50", color: "#2f6fde", kind: "line", unit: " ms" },
  { label: "p95", color: "#b06a00", kind: "line", unit: " ms" },
];

/** Every bucket of the window (uPlot wants one x per bar), the empty ones as 0 turns and no latency. */
function buckets(overview: OverviewOut) {
  const step = overview.bucketSeconds;
  const since = new Date(overview.since).getTime() / 1000;
  const until = new Date(overview.until).getTime() / 1000;
  const count = Math.max(Math.ceil((until - since) / step), 1);
  const x = Array.from({ length: count }, (_, i) => Math.floor(since + i * step));
  const turns = new Array<number>(count).fill(0);
  const failed = new Array<number>(count).fill(0);
  const p50 = new Array<number | null>(count).fill(null);
  const p95 = new Array<number | null>(count).fill(null);
  for (const bucket of overview.series) {
    // The server's buckets start at `since` + k steps.
    const i = Math.round((new Date(bucket.startedAt).getTime() / 1000 - since) / step);
    if (i < 0 || i >= count) continue;
    turns[i] = bucket.turns;
    failed[i] = bucket.errors;
    p50[i] = bucket.latencyP50Ms ?? null;
    p95[i] = bucket.latencyP95Ms ?? null;
  }
  return { x, turnYs: [turns, failed], latencyYs: [p50, p95] };
}

function Stat(props: { label: string; value: string; tone?: string; href?: string }) {
  const body = (
    <>
      <div className="obs-stat-value">{props.value}</div>
      <div className="obs-stat-label">{props.label}</div>
    </>
  );
  const className = `obs-stat${props.tone ? ` ${props.tone}` : ""}`;
  return props.href ? (
    <a className={`${className} obs-stat-link`} href={props.href}>
      {body}
    </a>
  ) : (
    <div className={className}>{body}</div>
  );
}

function Health(props: { health: ObservabilityHealthOut | undefined; error: Error | undefined }) {
  const { health, error } = props;
  if (error) return <p className="error-text">Health: {messageOf(error)}</p>;
  if (!health) return <p className="muted">Loading health…</p>;
  return (
    <section className="obs-panel" aria-labelledby="obs-health">
      <h2 id="obs-health">Exporters</h2>
      <p>
        Store:{" "}
        {health.storeReachable ? (
          <span className="badge ok">reachable</span>
        ) : (
          <span className="badge bad">unreachable: {health.storeDetail}</span>
        )}
      </p>
      <Table
        label="Exporters by process"
        columns={["Service", "Process", "Last heartbeat", { title: "Queue", num: true }, { title: "Spans exported", num: true }, { title: "Spans dropped", num: true }, { title: "Logs dropped", num: true }, "Last error"]}
        rows={health.processes.map((p) => (
          <tr key={`${p.service}/${p.instance}`}>
            <td>
              {p.service} {p.stale ? <span className="badge warn">stale</span> : null}
            </td>
            <td className="mono">{p.instance}</td>
            <td>{stamp(p.seenAt)}</td>
            <td className="num">
              {p.queueDepth}/{p.queueLimit}
            </td>
            <td className="num">{p.exportedSpans}</td>
            <td className={`num${p.droppedSpans ? " danger-text" : ""}`}>{p.droppedSpans}</td>
            <td className="num">{p.droppedLogs}</td>
            <td className="obs-wrap">{p.lastError ? `${p.lastError} (${stamp(p.lastErrorAt)})` : "—"}</td>
          </tr>
        ))}
        empty="No process has written a heartbeat in the last hour."
      />
    </section>
  );
}

export function Overview() {
  const [window, setWindow] = useState<Window>(DEFAULT_WINDOW);
  // The traces a figure links to cover the same window (a preset; a custom range is not carried over).
  const linkedWindow = window.preset === "custom" ? undefined : window.preset;
  const overview = useLoad(["observability", "overview", window], () => obsApi.overview(windowParams(window)));
  const health = useLoad(["observability", "health"], obsApi.health);
  const data = overview.data;
  const chart = useMemo(() => (data ? buckets(data) : null), [data]);
  const tokens = data?.tokens ?? [];
  const maxTokens = Math.max(1, ...tokens.map((t) => t.inputTokens + t.outputTokens));
  const totalCost = tokens.some((t) => t.costUsd !== null) ? tokens.reduce((sum, t) => sum + (t.costUsd ?? 0), 0) : null;

  return (
    <div className="stack">
      <div className="obs-filters">
        <WindowPicker value={window} onChange={setWindow} />
        <button type="button" className="small" onClick={() => void overview.reload()}>
          Refresh
        </button>
      </div>
      {overview.error ? <p className="error-text">{messageOf(overview.error)}</p> : null}
      {data && chart ? (
        <>
          <div className="obs-stats" aria-label="Figures of the window">
            <Stat label="Turns" value={String(data.turns)} href={tracesHref({ kind: "turns", window: linkedWindow })} />
            <Stat
              label="Failed turns"
              value={String(data.errors)}
              tone={data.errors ? "bad" : undefined}
              href={tracesHref({ kind: "turns", status: "error", window: linkedWindow })}
            />
            <Stat label="Latency p50" value={ms(data.latencyP50Ms)} />
            <Stat label="Latency p95" value={ms(data.latencyP95Ms)} />
            <Stat label="First token p50" value={ms(data.firstTokenP50Ms)} />
            <Stat label="First token p95" value={ms(data.firstTokenP95Ms)} />
            <Stat label="Tokens" value={count(tokens.reduce((sum, t) => sum + t.inputTokens + t.outputTokens, 0))} />
            <Stat label="Cost" value={usd(totalCost)} />
          </div>
          <div className="obs-charts">
            <TimeChart title={`Turns per ${data.bucketSeconds / 60} min`} x={chart.x} ys={chart.turnYs} series={TURN_SERIES} />
            <TimeChart title="Turn latency" x={chart.x} ys={chart.latencyYs} series={LATENCY_SERIES} yLabel="ms" />
          </div>
          <section className="obs-panel" aria-labelledby="obs-tokens">
            <h2 id="obs-tokens">Tokens by model and agent</h2>
            <Table
              columns={["Model", "Agent", { title: "Calls", num: true }, { title: "Input", num: true }, { title: "Cached", num: true }, { title: "Output", num: true }, { title: "Cost", num: true }, { title: "Share of tokens", hidden: true }]}
              rows={tokens.map((t) => (
                <tr key={`${t.model}/${t.agentId}`}>
                  <td className="mono">{t.model || "—"}</td>
                  <td>
                    <a href={tracesHref({ agentId: t.agentId, window: linkedWindow })}>{t.agentId || "—"}</a>
                  </td>
                  <td className="num">{t.calls}</td>
                  <td className="num">{count(t.inputTokens)}</td>
                  <td className="num">{count(t.cachedInputTokens)}</td>
                  <td className="num">{count(t.outputTokens)}</td>
                  <td className="num">{usd(t.costUsd)}</td>
                  <td className="obs-bar-cell">
                    <span className="obs-bar in" style={{ width: `${(100 * t.inputTokens) / maxTokens}%` }} />
                    <span className="obs-bar out" style={{ width: `${(100 * t.outputTokens) / maxTokens}%` }} />
                  </td>
                </tr>
              ))}
              empty="No model call in this window."
            />
          </section>
        </>
      ) : overview.loading ? (
        <p className="muted">Loading…</p>
      ) : null}
      <Health health={health.data} error={health.error} />
    </div>
  );
}
