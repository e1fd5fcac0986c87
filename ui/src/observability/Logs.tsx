import { useId } from "react";
import { messageOf, useLoad } from "../common/useLoad";
import type { LogOut } from "../api/types";
import { obsApi } from "./api";
import { isTraceId, traceHref } from "./routes";
import { stamp, windowParams } from "./time";
import { Pager, TextFilter, usePagedFilter } from "./paging";
import { WindowPicker } from "./WindowPicker";

const PAGE = 50;
const LEVELS = ["debug", "info", "warning", "error", "critical"];
const TONE: Record<string, string> = { warning: "warn", error: "bad", critical: "bad", info: "pending", debug: "" };

type Filters = { service: string; level: string; traceId: string };

function Extra(props: { log: LogOut }) {
  const entries = Object.entries(props.log.attributes);
  if (!entries.length) return null;
  return (
    <span className="obs-log-extra">
      {entries.map(([key, value]) => (
        <span key={key}>
          {key}={typeof value === "string" ? value : JSON.stringify(value)}
        </span>
      ))}
    </span>
  );
}

/** Stored logs (warnings and errors, and the info loggers the settings select): by service, level, trace and time. */
export function Logs(props: { params: URLSearchParams }) {
  const id = useId();
  const initial: Filters = {
    service: props.params.get("service") ?? "",
    level: props.params.get("level") ?? "",
    traceId: props.params.get("traceId") ?? "",
  };
  const paged = usePagedFilter<Filters>(initial);
  const { draft, setDraft, filters, window, cursor } = paged;
  const traceId = filters.traceId.trim();
  const badTrace = traceId !== "" && !isTraceId(traceId);
  const list = useLoad(
    ["observability", "logs", filters, window, cursor],
    () =>
      badTrace
        ? Promise.reject(new Error("A trace id is 32 hex digits."))
        : obsApi.logs({
            ...windowParams(window),
            service: filters.service.trim() || undefined,
            level: filters.level || undefined,
            traceId: traceId || undefined,
            cursor,
            limit: PAGE,
          }),
  );

  const logs = list.data?.logs ?? [];
  const next = list.data?.nextCursor ?? null;
  return (
    <div className="stack">
      <form className="obs-filters" onSubmit={paged.apply} aria-label="Log filters">
        <TextFilter
          label="Service"
          value={draft.service}
          placeholder="e.g. popagent-gateway"
          onChange={(value) => setDraft({ ...draft, service: value })}
        />
        <div className="obs-field">
          <label htmlFor={`${id}-level`}>Level</label>
          <select id={`${id}-level`} value={draft.level} onChange={(e) => setDraft({ ...draft, level: e.target.value })}>
            <option value="">Any stored</option>
            {LEVELS.map((level) => (
              <option key={level} value={level}>
                {level} or worse
              </option>
            ))}
          </select>
        </div>
        <TextFilter
          label="Trace"
          mono
          value={draft.traceId}
          placeholder="32 hex digits"
          onChange={(value) => setDraft({ ...draft, traceId: value })}
        />
        <WindowPicker value={window} onChange={paged.setWindow} />
        <button type="submit" className="primary small">
          Apply
        </button>
      </form>
      {list.error ? <p className="error-text">{messageOf(list.error)}</p> : null}
      <ol className="obs-logs" aria-label="Logs" aria-busy={list.loading || undefined}>
        {logs.map((log) => (
          <li key={log.id} className="obs-log">
            <span className="obs-log-time">{stamp(log.loggedAt)}</span>
            <span className={`badge ${TONE[log.level] ?? ""}`}>{log.level}</span>
            <span className="obs-log-service">{log.service}</span>
            <span className="obs-log-message">{log.message}</span>
            <span className="obs-log-logger mono">{log.logger}</span>
            {log.traceId ? (
              <a className="obs-log-trace mono" href={traceHref(log.traceId)}>
                trace {log.traceId.slice(0, 8)}…
              </a>
            ) : null}
            <Extra log={log} />
          </li>
        ))}
        {!list.loading && !list.error && logs.length === 0 ? <li className="muted">No stored log matches.</li> : null}
      </ol>
      <Pager page={paged.cursors.length + 1} onNewer={paged.newer} next={next} onOlder={paged.older} />
    </div>
  );
}
