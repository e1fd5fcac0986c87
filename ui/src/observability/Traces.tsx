import { useId } from "react";
import { messageOf, useLoad } from "../common/useLoad";
import { obsApi } from "./api";
import { traceHref } from "./routes";
import { ms, stamp, windowParams } from "./time";
import { Pager, TextFilter, usePagedFilter } from "./paging";
import { WindowPicker } from "./WindowPicker";

const PAGE = 25;

/** Rows a page: `?limit=` of the URL (1–200), else 25. */
function pageSize(params: URLSearchParams): number {
  const asked = Number(params.get("limit"));
  return Number.isInteger(asked) && asked >= 1 && asked <= 200 ? asked : PAGE;
}

type Filters = { sessionId: string; agentId: string; status: string };

/** The traces list: filters by session, status, agent and time; pages by the API's cursor. */
export function Traces(props: { params: URLSearchParams }) {
  const id = useId();
  const limit = pageSize(props.params);
  const initial: Filters = {
    sessionId: props.params.get("sessionId") ?? "",
    agentId: props.params.get("agentId") ?? "",
    status: props.params.get("status") ?? "",
  };
  const paged = usePagedFilter<Filters>(initial);
  const { draft, setDraft, filters, window, cursor } = paged;
  const list = useLoad(
    ["observability", "traces", filters, window, cursor, limit],
    () =>
      obsApi.traces({
        ...windowParams(window),
        sessionId: filters.sessionId.trim() || undefined,
        agentId: filters.agentId.trim() || undefined,
        status: filters.status || undefined,
        cursor,
        limit,
      }),
  );

  const traces = list.data?.traces ?? [];
  const next = list.data?.nextCursor ?? null;
  return (
    <div className="stack">
      <form className="obs-filters" onSubmit={paged.apply} aria-label="Trace filters">
        <TextFilter
          label="Session"
          value={draft.sessionId}
          placeholder="session id"
          onChange={(value) => setDraft({ ...draft, sessionId: value })}
        />
        <TextFilter
          label="Agent"
          value={draft.agentId}
          placeholder="e.g. supervisor"
          onChange={(value) => setDraft({ ...draft, agentId: value })}
        />
        <div className="obs-field">
          <label htmlFor={`${id}-status`}>Status</label>
          <select id={`${id}-status`} value={draft.status} onChange={(e) => setDraft({ ...draft, status: e.target.value })}>
            <option value="">Any</option>
            <option value="ok">OK</option>
            <option value="error">Failed</option>
          </select>
        </div>
        <WindowPicker value={window} onChange={paged.setWindow} />
        <button type="submit" className="primary small">
          Apply
        </button>
      </form>
      {list.error ? <p className="error-text">{messageOf(list.error)}</p> : null}
      <div className="obs-table-wrap">
        <table className="obs-table" aria-label="Traces" aria-busy={list.loading || undefined}>
          <thead>
            <tr>
              <th>Started</th>
              <th>Root</th>
              <th>Status</th>
              <th className="num">Duration</th>
              <th className="num">Spans</th>
              <th>Agents</th>
              <th>Services</th>
              <th>Session</th>
            </tr>
          </thead>
          <tbody>
            {traces.map((t) => (
              <tr key={t.traceId}>
                <td>
                  <a href={traceHref(t.traceId)} title={t.traceId}>
                    {stamp(t.startedAt)}
                  </a>
                </td>
                <td className="mono">{t.rootName}</td>
                <td>{t.status === "error" ? <span className="badge bad">failed</span> : <span className="badge ok">ok</span>}</td>
                <td className="num">{ms(t.durationMs)}</td>
                <td className="num">{t.spanCount}</td>
                <td>{t.agents.join(", ") || "—"}</td>
                <td className="obs-wrap">{t.services.join(", ")}</td>
                <td className="mono obs-wrap">{t.sessionId ?? "—"}</td>
              </tr>
            ))}
            {!list.loading && traces.length === 0 ? (
              <tr>
                <td colSpan={8} className="muted">
                  No trace matches.
                </td>
              </tr>
            ) : null}
          </tbody>
        </table>
      </div>
      <Pager page={paged.cursors.length + 1} onNewer={paged.newer} next={next} onOlder={paged.older} />
    </div>
  );
}
