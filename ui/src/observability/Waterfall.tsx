import { useMemo, useState } from "react";
import { messageOf, useLoad } from "../common/useLoad";
import type { SpanOut } from "../api/types";
import { stamp } from "../common/stamp";
import { obsApi } from "./api";
import { isTraceId, logsHref, tracesHref } from "./routes";
import { ms } from "./time";

const SERVICE_COLORS = ["#2f6fde", "#1c8c5a", "#b06a00", "#8b3fd1", "#c2306b", "#17808f", "#6b7280", "#a15c2e"];

type Row = { span: SpanOut; depth: number; offsetMs: number };

/** The span forest depth-first, children in start order, each with its start relative to the trace's. */
function flatten(roots: SpanOut[]): { rows: Row[]; totalMs: number } {
  const all: { span: SpanOut; depth: number }[] = [];
  const walk = (span: SpanOut, depth: number) => {
    all.push({ span, depth });
    for (const child of span.children) walk(child, depth + 1);
  };
  for (const root of roots) walk(root, 0);
  const start = Math.min(...all.map(({ span }) => new Date(span.startedAt).getTime()));
  const end = Math.max(...all.map(({ span }) => new Date(span.startedAt).getTime() + span.durationMs));
  const rows = all.map(({ span, depth }) => ({ span, depth, offsetMs: new Date(span.startedAt).getTime() - start }));
  return { rows, totalMs: Math.max(end - start, 0.001) };
}

/** A span's name; a SQL span named after the query's leading comment ("--") by its first keyword. */
export function spanLabel(span: SpanOut): string {
  const statement = span.attributes["db.statement"];
  if (typeof statement !== "string" || !/^(--|\/\*)/.test(span.name)) return span.name;
  const line = statement.split("\n").find((l) => l.trim() && !l.trim().startsWith("--"));
  return line?.trim().split(/\s+/, 1)[0]?.toUpperCase() ?? span.name;
}

function value(v: unknown): string {
  return typeof v === "string" ? v : JSON.stringify(v);
}

function SpanDetails(props: { row: Row; color: string }) {
  const { span, offsetMs } = props.row;
  const attributes = Object.entries(span.attributes).sort(([a], [b]) => a.localeCompare(b));
  return (
    <section className="obs-panel obs-span-details" aria-label={spanLabel(span)}>
      <h2>
        <span className="obs-dot" style={{ background: props.color }} /> {spanLabel(span)}
      </h2>
      <dl className="obs-facts">
        <dt>Service</dt>
        <dd>{span.service}</dd>
        <dt>Kind</dt>
        <dd>{span.kind}</dd>
        <dt>Status</dt>
        <dd>
          {span.status === "error" ? <span className="badge bad">error</span> : <span className="badge ok">{span.status}</span>}
          {span.statusMessage ? ` ${span.statusMessage}` : ""}
        </dd>
        <dt>Start</dt>
        <dd>
          +{ms(offsetMs)} ({stamp(span.startedAt)})
        </dd>
        <dt>Duration</dt>
        <dd>{ms(span.durationMs)}</dd>
        <dt>Span id</dt>
        <dd className="mono">{span.spanId}</dd>
      </dl>
      <table className="obs-table obs-attributes" aria-label="Span attributes">
        <thead>
          <tr>
            <th>Attribute</th>
            <th>Value</th>
          </tr>
        </thead>
        <tbody>
          {attributes.map(([key, v]) => (
            <tr key={key}>
              <td className="mono">{key}</td>
              <td className="mono obs-wrap">{value(v)}</td>
            </tr>
          ))}
          {attributes.length === 0 ? (
            <tr>
              <td colSpan={2} className="muted">
                No attributes.
              </td>
            </tr>
          ) : null}
        </tbody>
      </table>
    </section>
  );
}

/** One trace: its spans across every process as a waterfall, and the chosen span's attributes. */
export function Waterfall(props: { traceId: string }) {
  const { traceId } = props;
  const valid = isTraceId(traceId);
  const trace = useLoad(["observability", "trace", traceId], () =>
    valid ? obsApi.trace(traceId) : Promise.reject(new Error("not a trace id (32 hex digits)")),
  );
  const [selected, setSelected] = useState<string | null>(null);
  const layout = useMemo(() => (trace.data ? flatten(trace.data.roots) : null), [trace.data]);
  const services = useMemo(() => [...new Set(layout?.rows.map((r) => r.span.service) ?? [])].sort(), [layout]);
  const colorOf = (service: string) => SERVICE_COLORS[services.indexOf(service) % SERVICE_COLORS.length] ?? "#6b7280";
  const chosen = layout?.rows.find((r) => r.span.spanId === selected) ?? layout?.rows[0];

  return (
    <div className="stack">
      <p>
        <a href={tracesHref()}>← Traces</a> · <a href={logsHref({ traceId })}>Logs of this trace</a>
      </p>
      <h2 className="mono obs-trace-id">Trace {traceId}</h2>
      {trace.error ? <p className="error-text">{messageOf(trace.error)}</p> : null}
      {trace.loading && !trace.data ? <p className="muted">Loading…</p> : null}
      {layout && trace.data ? (
        <>
          <p className="muted">
            {trace.data.spanCount} spans over {ms(layout.totalMs)} in {services.length} processes:{" "}
            {services.map((service) => (
              <span key={service} className="obs-legend">
                <span className="obs-dot" style={{ background: colorOf(service) }} /> {service}
              </span>
            ))}
          </p>
          <div className="obs-waterfall-layout">
            <div className="obs-waterfall" role="list" aria-label="Spans">
              {layout.rows.map((row) => {
                const left = (100 * row.offsetMs) / layout.totalMs;
                const width = Math.max((100 * row.span.durationMs) / layout.totalMs, 0.3);
                const isChosen = chosen?.span.spanId === row.span.spanId;
                return (
                  <button
                    type="button"
                    role="listitem"
                    key={row.span.spanId}
                    className={`obs-span-row${isChosen ? " chosen" : ""}${row.span.status === "error" ? " failed" : ""}`}
                    aria-current={isChosen || undefined}
                    data-span={row.span.name}
                    data-service={row.span.service}
                    onClick={() => setSelected(row.span.spanId)}
                  >
                    <span className="obs-span-name" style={{ paddingLeft: `${row.depth * 14}px` }} title={row.span.name}>
                      {spanLabel(row.span)}
                    </span>
                    <span className="obs-span-track">
                      <span
                        className="obs-span-bar"
                        style={{ left: `${Math.min(left, 99.7)}%`, width: `${Math.min(width, 100 - Math.min(left, 99.7))}%`, background: colorOf(row.span.service) }}
                      />
                    </span>
                    <span className="obs-span-ms">{ms(row.span.durationMs)}</span>
                  </button>
                );
              })}
            </div>
            {chosen ? <SpanDetails row={chosen} color={colorOf(chosen.span.service)} /> : null}
          </div>
        </>
      ) : null}
    </div>
  );
}
