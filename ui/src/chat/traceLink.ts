// Where a message's "Trace" link goes: the observability pages' trace view. One place, so the
// address can follow that page's route.
export const TRACE_ROUTE_PREFIX = "#/observability/traces/";

export function traceHref(traceId: string): string {
  return `${TRACE_ROUTE_PREFIX}${encodeURIComponent(traceId)}`;
}
