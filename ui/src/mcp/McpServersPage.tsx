// Users' MCP servers: list, add (streamable HTTP with an optional bearer token or OAuth, or a stdio
// command run in the sandbox), grant to agents, connect an OAuth server (its authorization page in a
// window of its own), test the connection and delete. A stored token is never shown.
import { useEffect, useId, useState, type FormEvent } from "react";
import { api } from "../api/client";
import type { McpServerOut, McpServerTestOut } from "../api/types";
import { ErrorText, LoadError } from "../common/ErrorText";
import { messageOf, useLoad } from "../common/useLoad";
import { mcpServersApi } from "./api";

type Draft = {
  name: string; transport: "http" | "stdio"; auth: "bearer" | "oauth"; url: string; token: string; command: string; args: string; agents: string[];
};

const EMPTY: Draft = { name: "", transport: "http", auth: "bearer", url: "", token: "", command: "", args: "", agents: ["popagent"] };

function AddServerForm(props: { agentIds: string[]; onAdded: () => Promise<void>; onCancel: () => void }) {
  const id = useId();
  const [draft, setDraft] = useState<Draft>(EMPTY);
  const [error, setError] = useState<string | null>(null);
  const [saving, setSaving] = useState(false);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setSaving(true);
    setError(null);
    const agents = Object.fromEntries(draft.agents.map((agentId) => [agentId, {}]));
    try {
      if (draft.transport === "http") {
        await mcpServersApi.create(
          draft.auth === "oauth"
            ? { name: draft.name, transport: "http", url: draft.url, auth: "oauth", agents }
            : { name: draft.name, transport: "http", url: draft.url, agents, ...(draft.token ? { token: draft.token } : {}) },
        );
      } else {
        const args = draft.args.split("\n").filter((line) => line.length > 0);
        await mcpServersApi.create({ name: draft.name, transport: "stdio", command: draft.command, args, agents });
      }
      setDraft(EMPTY);
      await props.onAdded();
    } catch (caught) {
      setError(messageOf(caught));
    } finally {
      setSaving(false);
    }
  };

  const toggleAgent = (agentId: string, on: boolean) =>
    setDraft({ ...draft, agents: on ? [...draft.agents, agentId] : draft.agents.filter((a) => a !== agentId) });

  return (
    <form className="card settings-form" onSubmit={(event) => void submit(event)} aria-label="New MCP server">
      <div className="field">
        <label className="field-label" htmlFor={`${id}-name`}>Name</label>
        <input id={`${id}-name`} value={draft.name} maxLength={32} pattern="[a-z][a-z0-9]*(_[a-z0-9]+)*" required
          onChange={(event) => setDraft({ ...draft, name: event.target.value })} />
        <span className="field-hint">Lowercase letters and digits, words joined by single underscores; the model sees its tools as mcp__name__tool.</span>
      </div>
      <div className="field">
        <label className="field-label" htmlFor={`${id}-transport`}>Transport</label>
        <select id={`${id}-transport`} value={draft.transport}
          onChange={(event) => setDraft({ ...draft, transport: event.target.value as Draft["transport"] })}>
          <option value="http">Streamable HTTP</option>
          <option value="stdio">stdio (a command run in the sandbox, no network)</option>
        </select>
      </div>
      {draft.transport === "http" ? (
        <>
          <div className="field">
            <label className="field-label" htmlFor={`${id}-url`}>URL</label>
            <input id={`${id}-url`} type="url" value={draft.url} maxLength={2000} required placeholder="https://example.com/mcp"
              onChange={(event) => setDraft({ ...draft, url: event.target.value })} />
          </div>
          <div className="field">
            <label className="field-label" htmlFor={`${id}-auth`}>Authorization</label>
            <select id={`${id}-auth`} value={draft.auth}
              onChange={(event) => setDraft({ ...draft, auth: event.target.value as Draft["auth"] })}>
              <option value="bearer">Bearer token (or none)</option>
              <option value="oauth">OAuth (sign in at the server's authorization page)</option>
            </select>
          </div>
          {draft.auth === "bearer" ? (
            <div className="field">
              <label className="field-label" htmlFor={`${id}-token`}>Bearer token (optional)</label>
              <input id={`${id}-token`} type="password" autoComplete="off" value={draft.token} maxLength={8000}
                onChange={(event) => setDraft({ ...draft, token: event.target.value })} />
              <span className="field-hint">Kept in the secrets service and never shown again.</span>
            </div>
          ) : (
            <span className="field-hint">After adding it, Connect opens the server's authorization page; its tokens are kept in the secrets service and never shown.</span>
          )}
        </>
      ) : (
        <>
          <div className="field">
            <label className="field-label" htmlFor={`${id}-command`}>Command</label>
            <input id={`${id}-command`} value={draft.command} maxLength={1000} required placeholder="python"
              onChange={(event) => setDraft({ ...draft, command: event.target.value })} />
          </div>
          <div className="field">
            <label className="field-label" htmlFor={`${id}-args`}>Arguments (one a line)</label>
            <textarea id={`${id}-args`} rows={3} value={draft.args} onChange={(event) => setDraft({ ...draft, args: event.target.value })} />
          </div>
        </>
      )}
      <fieldset className="field">
        <legend className="field-label">Agents that get its tools</legend>
        {props.agentIds.map((agentId) => (
          <label key={agentId} className="checkbox-option">
            <input type="checkbox" checked={draft.agents.includes(agentId)} onChange={(event) => toggleAgent(agentId, event.target.checked)} />
            {agentId}
          </label>
        ))}
      </fieldset>
      <ErrorText error={error} />
      <div className="form-actions">
        <button type="submit" disabled={saving}>Add server</button>
        <button type="button" className="ghost" onClick={props.onCancel}>Cancel</button>
      </div>
    </form>
  );
}

function TestResult(props: { result: McpServerTestOut }) {
  const { result } = props;
  if (!result.ok) return <p role="status" className="banner bad">Connection failed: {result.error}</p>;
  return (
    <div role="status" className="task-result">
      Connected to {result.serverName} {result.serverVersion}: {result.tools.length} tools
      <ul>
        {result.tools.map((tool) => (
          <li key={tool.name}><code>{tool.modelName || tool.name}</code> {tool.description}</li>
        ))}
      </ul>
    </div>
  );
}

function OAuthState(props: { server: McpServerOut }) {
  const oauth = props.server.oauth;
  if (!oauth) return null;
  if (oauth.connected) {
    const expired = oauth.expiresAt !== null && Date.parse(oauth.expiresAt) < Date.now();
    return <span className="badge" data-testid="mcp-oauth-state">{expired ? "OAuth: token expired, refreshed on next use" : "OAuth connected"}</span>;
  }
  return <span className="badge warn" data-testid="mcp-oauth-state">{oauth.error ? "OAuth: reconnect needed" : "OAuth: not connected"}</span>;
}

function ServerCard(props: { server: McpServerOut; onChanged: () => Promise<void>; onError: (message: string) => void }) {
  const { server } = props;
  const [tested, setTested] = useState<McpServerTestOut | null>(null);
  const [testing, setTesting] = useState(false);
  const connect = async () => {
    // Opened before the request so that the browser treats it as the click's window (no popup block).
    const opened = window.open("about:blank", "_blank");
    try {
      const started = await mcpServersApi.startOAuth(server.id);
      if (opened) opened.location.href = started.authorizationUrl;
      else window.location.assign(started.authorizationUrl);
    } catch (caught) {
      opened?.close();
      props.onError(`Could not connect ${server.name}: ${messageOf(caught)}`);
    }
  };
  const test = async () => {
    setTesting(true);
    try {
      setTested(await mcpServersApi.test(server.id));
    } catch (caught) {
      props.onError(`Could not test ${server.name}: ${messageOf(caught)}`);
    } finally {
      setTesting(false);
    }
  };
  const remove = async () => {
    try {
      await mcpServersApi.remove(server.id);
    } catch (caught) {
      props.onError(`Could not delete ${server.name}: ${messageOf(caught)}`);
    }
    await props.onChanged();
  };
  return (
    <li className="card" data-testid="mcp-server">
      <div className="task-head">
        <strong>{server.name}</strong>
        <span className="badge">{server.transport}</span>
        {server.tokenSet ? <span className="badge">token set</span> : null}
        <OAuthState server={server} />
        {server.enabled ? null : <span className="badge warn">disabled</span>}
      </div>
      <p className="muted small-text">
        {server.transport === "http" ? server.url : [server.command, ...server.args].join(" ").slice(0, 200)}
      </p>
      <p className="small-text">
        Agents: {Object.keys(server.agents).length
          ? Object.entries(server.agents).map(([agentId, grant]) => agentId + (grant.tools?.length ? ` (${grant.tools.join(", ")})` : "")).join(", ")
          : "none"}
      </p>
      <div className="task-actions">
        {server.auth === "oauth" ? (
          <button type="button" className="ghost small" onClick={() => void connect()}>{server.oauth?.connected ? "Reconnect" : "Connect"}</button>
        ) : null}
        <button type="button" className="ghost small" disabled={testing} onClick={() => void test()}>{testing ? "Testing…" : "Test"}</button>
        <button type="button" className="ghost small danger-text" onClick={() => void remove()}>Delete</button>
      </div>
      {server.oauth?.error ? <p className="small-text banner bad">{server.oauth.error}</p> : null}
      {tested ? <TestResult result={tested} /> : null}
    </li>
  );
}

export default function McpServersPage() {
  const agents = useLoad(["agents"], api.agents);
  const servers = useLoad(["mcp-servers"], mcpServersApi.list);
  const [adding, setAdding] = useState(false);
  const [actionError, setActionError] = useState<string | null>(null);
  const agentIds = agents.data?.agents.map((agent) => agent.id) ?? [];

  const added = async () => {
    setAdding(false);
    await servers.reload();
  };

  // The authorization window's page (the gateway's OAuth callback) says when it is done; the window
  // may also be closed by hand, so the list is read again when this window gets the focus back.
  const reload = servers.reload;
  useEffect(() => {
    const onMessage = (event: MessageEvent) => {
      if (event.origin === window.location.origin && (event.data as { type?: string } | null)?.type === "popagent-mcp-oauth") void reload();
    };
    const onFocus = () => void reload();
    window.addEventListener("message", onMessage);
    window.addEventListener("focus", onFocus);
    return () => {
      window.removeEventListener("message", onMessage);
      window.removeEventListener("focus", onFocus);
    };
  }, [reload]);

  return (
    <div className="page tasks-page">
      <h1>MCP servers</h1>
      <p className="muted">Your own MCP servers: the agents you choose get their tools, through the same hooks and approvals as every tool.</p>
      {actionError ? <p role="alert" className="banner bad">{actionError}</p> : null}
      <LoadError what="MCP servers" error={servers.error} />
      <section className="stack" aria-label="MCP servers">
        <div className="section-head">
          <h2>Servers</h2>
          <button type="button" className="ghost small" onClick={() => setAdding(true)}>Add server</button>
        </div>
        {adding ? <AddServerForm agentIds={agentIds} onAdded={added} onCancel={() => setAdding(false)} /> : null}
        <ul className="task-list" data-testid="mcp-server-list">
          {servers.data?.servers.length === 0 ? <li className="muted">No MCP servers.</li> : null}
          {servers.data?.servers.map((server) => (
            <ServerCard key={server.id} server={server} onChanged={servers.reload} onError={setActionError} />
          ))}
        </ul>
      </section>
    </div>
  );
}
