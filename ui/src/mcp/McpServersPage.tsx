// Users' MCP servers: list, add (streamable HTTP with an optional bearer token, or a stdio command run
// in the sandbox), grant to agents, test the connection and delete. A stored token is never shown.
import { useId, useState, type FormEvent } from "react";
import { api } from "../api/client";
import type { McpServerOut, McpServerTestOut } from "../api/types";
import { ErrorText, LoadError } from "../common/ErrorText";
import { messageOf, useLoad } from "../common/useLoad";
import { mcpServersApi } from "./api";

type Draft = { name: string; transport: "http" | "stdio"; url: string; token: string; command: string; args: string; agents: string[] };

const EMPTY: Draft = { name: "", transport: "http", url: "", token: "", command: "", args: "", agents: ["popagent"] };

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
        await mcpServersApi.create({
          name: draft.name, transport: "http", url: draft.url, agents, ...(draft.token ? { token: draft.token } : {}),
        });
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
            <label className="field-label" htmlFor={`${id}-token`}>Bearer token (optional)</label>
            <input id={`${id}-token`} type="password" autoComplete="off" value={draft.token} maxLength={8000}
              onChange={(event) => setDraft({ ...draft, token: event.target.value })} />
            <span className="field-hint">Kept in the secrets service and never shown again.</span>
          </div>
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

function ServerCard(props: { server: McpServerOut; onChanged: () => Promise<void>; onError: (message: string) => void }) {
  const { server } = props;
  const [tested, setTested] = useState<McpServerTestOut | null>(null);
  const [testing, setTesting] = useState(false);
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
        <button type="button" className="ghost small" disabled={testing} onClick={() => void test()}>{testing ? "Testing…" : "Test"}</button>
        <button type="button" className="ghost small danger-text" onClick={() => void remove()}>Delete</button>
      </div>
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
