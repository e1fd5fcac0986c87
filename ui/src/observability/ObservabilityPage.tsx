// The observability pages (lazy-loaded by ./index.ts): overview, traces and a trace's waterfall, logs.
import { Logs } from "./Logs";
import { Overview } from "./Overview";
import { logsHref, overviewHref, parseObsPath, tracesHref } from "./routes";
import { Traces } from "./Traces";
import { Waterfall } from "./Waterfall";
import "./observability.css";

export default function ObservabilityPage(props: { path: string }) {
  const route = parseObsPath(props.path);
  const tabs = [
    { view: "overview", label: "Overview", href: overviewHref() },
    { view: "traces", label: "Traces", href: tracesHref() },
    { view: "logs", label: "Logs", href: logsHref() },
  ];
  return (
    <div className="obs-page">
      <h1>Observability</h1>
      <nav className="obs-tabs" aria-label="Observability">
        {tabs.map((tab) => (
          <a key={tab.view} href={tab.href} aria-current={route.view === tab.view ? "page" : undefined}>
            {tab.label}
          </a>
        ))}
      </nav>
      {route.view === "overview" ? <Overview /> : null}
      {route.view === "traces" && route.traceId ? <Waterfall traceId={route.traceId} /> : null}
      {/* Keyed by the query, so a link with other filters starts the list afresh. */}
      {route.view === "traces" && !route.traceId ? <Traces key={route.params.toString()} params={route.params} /> : null}
      {route.view === "logs" ? <Logs key={route.params.toString()} params={route.params} /> : null}
    </div>
  );
}
