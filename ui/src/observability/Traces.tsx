import { useLoad } from "../common/useLoad";
import { stamp } from "../common/stamp";
import { obsApi } from "./api";
import { traceHref, tracesHref } from "./routes";
import { Table } from "./Table";
import { ms, windowOfParam, windowParams } from "./time";
import { FilterForm, Pager, SelectFilter, TextFilter, usePagedFilter } from "./paging";

const PAGE = 25;

/** Rows a page: `?limit=` of the URL (1–200), else 25. */
function pageSize(params: URLSearchParams): number {
  const asked = Number(params.get("limit"));
  return Number.isInteger(asked) && asked >= 1 && asked <= 200 ? asked : PAGE;
}

type Filters = { sessionId: string; agentId: string; status: string; kind: "turns" | "all" };

/** The traces list: filters by session, status, agent and time; pages by the API's cursor. By default
 * only the turns' traces, as the overview counts them; "every request" adds the rest (the UI's own
 * polling among them). */
export function Traces(props: { params: URLSearchParams }) {
  const limit = pageSize(props.params);
  const initial: Filters = {
    sessionId: props.params.get("sessionId") ?? "",
    agentId: props.params.get("agentId") ?? "",
    status: props.params.get("status") ?? "",
    kind: props.params.get("kind") === "all" ? "all" : "turns",
  };
  const paged = usePagedFilter<Filters>(initial, windowOfParam(props.params.get("window")));
  const { draft, setDraft, filters, window, cursor } = paged;
  const list = useLoad(
    ["observability", "traces", filters, window, cursor, limit],
    () =>
      obsApi.traces({
        ...windowParams(window),
        sessionId: filters.sessionId.trim() || undefined,
        agentId: filters.agentId.trim() || undefined,
        status: filters.status || undefined,
        kind: filters.kind,
        cursor,
        limit,
      }),
  );

  const traces = list.data?.traces ?? [];
  const next = list.data?.nextCursor ?? null;
  return (
    <div className="stack">
      <FilterForm label="Trace filters" paged={paged} list={list}>
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
        <SelectFilter
          label="Show"
          value={draft.kind}
          options={[
            ["turns", "Turns"],
            ["all", "Every request"],
          ]}
          onChange={(value) => setDraft({ ...draft, kind: value === "all" ? "all" : "turns" })}
        />
        <SelectFilter
          label="Status"
          value={draft.status}
          options={[
            ["", "Any"],
            ["ok", "OK"],
            ["error", "Failed"],
          ]}
          onChange={(value) => setDraft({ ...draft, status: value })}
        />
      </FilterForm>
      <Table
        label="Traces"
        busy={list.loading}
        columns={["Started", "Root", "Status", { title: "Duration", num: true }, { title: "Spans", num: true }, "Agents", "Services", "Session"]}
        rows={traces.map((t) => (
          <tr key={t.traceId}>
            <td>
              <a href={traceHref(t.traceId)} title={t.traceId}>
                {stamp(t.startedAt)}
              </a>
            </td>
            <td className="mono">{t.rootName}</td>
            <td>{statusBadge(filters.kind === "turns" ? (t.turnStatus ?? t.status) : t.status)}</td>
            <td className="num">{ms(t.durationMs)}</td>
            <td className="num">{t.spanCount}</td>
            <td>
              {t.agents.length
                ? t.agents.map((agent, index) => (
                    <span key={agent}>
                      {index ? ", " : ""}
                      <a href={tracesHref({ agentId: agent, kind: filters.kind })}>{agent}</a>
                    </span>
                  ))
                : "—"}
            </td>
            <td className="obs-wrap">{t.services.join(", ")}</td>
            <td className="mono obs-wrap">
              {t.sessionId ? (
                <a href={tracesHref({ sessionId: t.sessionId, kind: filters.kind })} title="This session's traces">
                  {t.sessionId}
                </a>
              ) : (
                "—"
              )}
            </td>
          </tr>
        ))}
        empty={list.loading ? null : "No trace matches."}
      />
      <Pager paged={paged} next={next} />
    </div>
  );
}

function statusBadge(status: string) {
  return status === "error" ? <span className="badge bad">failed</span> : <span className="badge ok">ok</span>;
}
