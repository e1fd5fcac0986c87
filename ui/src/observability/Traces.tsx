import { useLoad } from "../common/useLoad";
import { stamp } from "../common/stamp";
import { obsApi } from "./api";
import { traceHref } from "./routes";
import { Table } from "./Table";
import { ms, windowParams } from "./time";
import { FilterForm, Pager, SelectFilter, TextFilter, usePagedFilter } from "./paging";

const PAGE = 25;

/** Rows a page: `?limit=` of the URL (1–200), else 25. */
function pageSize(params: URLSearchParams): number {
  const asked = Number(params.get("limit"));
  return Number.isInteger(asked) && asked >= 1 && asked <= 200 ? asked : PAGE;
}

type Filters = { sessionId: string; agentId: string; status: string };

/** The traces list: filters by session, status, agent and time; pages by the API's cursor. */
export function Traces(props: { params: URLSearchParams }) {
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
            <td>{t.status === "error" ? <span className="badge bad">failed</span> : <span className="badge ok">ok</span>}</td>
            <td className="num">{ms(t.durationMs)}</td>
            <td className="num">{t.spanCount}</td>
            <td>{t.agents.join(", ") || "—"}</td>
            <td className="obs-wrap">{t.services.join(", ")}</td>
            <td className="mono obs-wrap">{t.sessionId ?? "—"}</td>
          </tr>
        ))}
        empty={list.loading ? null : "No trace matches."}
      />
      <Pager paged={paged} next={next} />
    </div>
  );
}
