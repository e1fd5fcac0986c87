import { useLoad } from "../common/useLoad";
import type { LogOut } from "../api/types";
import { stamp } from "../common/stamp";
import { obsApi } from "./api";
import { isTraceId, traceHref } from "./routes";
import { windowParams } from "./time";
import { FilterForm, Pager, SelectFilter, TextFilter, usePagedFilter } from "./paging";

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
      <FilterForm label="Log filters" paged={paged} list={list}>
        <TextFilter
          label="Service"
          value={draft.service}
          placeholder="e.g. popagent-gateway"
          onChange={(value) => setDraft({ ...draft, service: value })}
        />
        <SelectFilter
          label="Level"
          value={draft.level}
          options={[["", "Any stored"], ...LEVELS.map((level): [string, string] => [level, `${level} or worse`])]}
          onChange={(value) => setDraft({ ...draft, level: value })}
        />
        <TextFilter
          label="Trace"
          mono
          value={draft.traceId}
          placeholder="32 hex digits"
          onChange={(value) => setDraft({ ...draft, traceId: value })}
        />
      </FilterForm>
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
      <Pager paged={paged} next={next} />
    </div>
  );
}
