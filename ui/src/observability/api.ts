// Typed reads of /api/observability.
import { http, unwrap, type FilterOf, type QueryOf } from "../api/client";

export const obsApi = {
  overview: (query: QueryOf<"/api/observability/overview">) =>
    unwrap(http.GET("/api/observability/overview", { params: { query } })),
  traces: (query: FilterOf<"/api/observability/traces">) =>
    unwrap(http.GET("/api/observability/traces", { params: { query: query as QueryOf<"/api/observability/traces"> } })),
  trace: (traceId: string) =>
    unwrap(http.GET("/api/observability/traces/{trace_id}", { params: { path: { trace_id: traceId } } })),
  logs: (query: FilterOf<"/api/observability/logs">) =>
    unwrap(http.GET("/api/observability/logs", { params: { query: query as QueryOf<"/api/observability/logs"> } })),
  health: () => unwrap(http.GET("/api/observability/health")),
};
