// The observability pages' hash routes, under #/observability (see ../route.ts):
//   #/observability                    overview
//   #/observability/traces?<filters>   the traces list (sessionId, agentId, status, kind: turns | all,
//                                      window: a preset such as 24h; limit: rows a page)
//   #/observability/traces/<traceId>   one trace's waterfall
//   #/observability/logs?<filters>     stored logs (service, level, traceId, window)
// Light on purpose: the chat imports `traceHref` without loading the pages themselves.

export type ObsView =
  | { view: "overview"; params: URLSearchParams }
  | { view: "traces"; traceId: string | null; params: URLSearchParams }
  | { view: "logs"; params: URLSearchParams };

const TRACE_ID = /^[0-9a-f]{32}$/;

/** The link to one trace's waterfall: `traceHref(message.metadata.traceId)`. */
export function traceHref(traceId: string): string {
  return `#/observability/traces/${encodeURIComponent(traceId)}`;
}

/** The traces list, filtered (e.g. `{ sessionId }` for one chat's traces). */
export function tracesHref(filters: Record<string, string | undefined> = {}): string {
  return `#/observability/traces${search(filters)}`;
}

/** The logs, filtered (e.g. `{ traceId }` for one trace's logs). */
export function logsHref(filters: Record<string, string | undefined> = {}): string {
  return `#/observability/logs${search(filters)}`;
}

export function overviewHref(filters: Record<string, string | undefined> = {}): string {
  return `#/observability${search(filters)}`;
}

export function isTraceId(value: string): boolean {
  return TRACE_ID.test(value);
}

function search(filters: Record<string, string | undefined>): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(filters)) if (value) params.set(name, value);
  const text = params.toString();
  return text ? `?${text}` : "";
}

/** The view of `path`, the part of the hash after `#/observability/`. */
export function parseObsPath(path: string): ObsView {
  const [where, query = ""] = path.split("?", 2) as [string, string?];
  const params = new URLSearchParams(query);
  const [view, arg] = where.split("/", 2);
  if (view === "traces") {
    let traceId: string | null = null;
    try {
      traceId = arg ? decodeURIComponent(arg) : null;
    } catch {
      traceId = arg ?? null;
    }
    return { view: "traces", traceId, params };
  }
  if (view === "logs") return { view: "logs", params };
  return { view: "overview", params };
}
