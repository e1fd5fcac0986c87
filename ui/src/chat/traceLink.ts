// Where a message's "Trace" link goes: the observability pages' trace view (their own route helper).
export { traceHref } from "../observability/routes";
