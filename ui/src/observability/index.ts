// What the rest of the UI uses of the observability pages: the route helpers (light), and the
// page itself, lazy-loaded so its code and the chart library stay out of the first load.
import { lazy } from "react";

export { logsHref, traceHref, tracesHref } from "./routes";
export const ObservabilityPage = lazy(() => import("./ObservabilityPage"));
