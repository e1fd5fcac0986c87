// The browser's connection as browser-bridge reports it: socket, server, tools, last error.
import { useEffect, useState } from "react";
import type { BrowserHealthOut } from "../api/types";
import { browserApi } from "./api";

export function BrowserHealthCard() {
  const [health, setHealth] = useState<BrowserHealthOut | null>(null);
  const [error, setError] = useState("");
  useEffect(() => {
    let live = true;
    const load = () =>
      browserApi.health().then(
        (value) => live && (setHealth(value), setError("")),
        (reason: unknown) => live && setError(reason instanceof Error ? reason.message : String(reason)),
      );
    void load();
    const timer = window.setInterval(load, 5000);
    return () => {
      live = false;
      window.clearInterval(timer);
    };
  }, []);
  if (error) return <p className="error-text" role="alert">Browser health unavailable: {error}</p>;
  if (!health) return <p className="muted">Checking the browser…</p>;
  const state = !health.configured ? "not configured" : health.reachable ? "connected" : "unavailable";
  return (
    <section className="card browser-health" aria-label="Browser health" data-testid="browser-health">
      <p>
        <strong>Browser server: {state}</strong>
        {health.reachable ? ` — ${health.serverName} ${health.serverVersion}, ${health.toolCount} tools` : null}
      </p>
      <p className="muted">Socket: {health.socketPath || "POPAGENT_BROWSER_SOCKET is not set"}</p>
      <p className="muted">Browser setting: {health.enabled ? "enabled" : "disabled"}</p>
      {health.lastError ? <p className="error-text">Last error: {health.lastError}</p> : null}
    </section>
  );
}
