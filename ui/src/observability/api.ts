// Typed reads of /api/observability (the generated DTOs; see ../api/types.ts for the convention).
import { authedFetch } from "../api/auth";
import { ApiError, fieldErrors, reasonOf } from "../api/client";
import type { components } from "../api/schema.gen";

type S = components["schemas"];
export type OverviewOut = S["OverviewOut"];
export type TokenUsageOut = S["TokenUsageOut"];
export type TurnBucketOut = S["TurnBucketOut"];
export type TraceListOut = S["TraceListOut"];
export type TraceSummaryOut = S["TraceSummaryOut"];
export type TraceOut = S["TraceOut"];
export type SpanOut = S["SpanOut"];
export type LogListOut = S["LogListOut"];
export type LogOut = S["LogOut"];
export type ObservabilityHealthOut = S["ObservabilityHealthOut"];
export type ProcessExporterOut = S["ProcessExporterOut"];

export type Params = Record<string, string | number | undefined>;

async function get<Out>(path: string, params: Params = {}): Promise<Out> {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== "") search.set(name, String(value));
  }
  const text = search.toString();
  const response = await authedFetch(`/api/observability${path}${text ? `?${text}` : ""}`);
  const body = await response.text();
  let parsed: unknown = undefined;
  try {
    parsed = body ? JSON.parse(body) : undefined;
  } catch {
    parsed = body;
  }
  if (!response.ok) {
    throw new ApiError(response.status, reasonOf(response.status, parsed, response.statusText), parsed, fieldErrors(parsed));
  }
  return parsed as Out;
}

export const obsApi = {
  overview: (params: Params) => get<OverviewOut>("/overview", params),
  traces: (params: Params) => get<TraceListOut>("/traces", params),
  trace: (traceId: string) => get<TraceOut>(`/traces/${encodeURIComponent(traceId)}`),
  logs: (params: Params) => get<LogListOut>("/logs", params),
  health: () => get<ObservabilityHealthOut>("/health"),
};
