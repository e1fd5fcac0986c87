// Channel connections: add one step by step (platform, credentials, who may talk and approve, workspace),
// then the webhook URL to paste into the platform's console; each connection's recent traffic and errors.
// Credentials go to the secrets service and are never shown again.
import { useId, useState, type FormEvent } from "react";
import type { ChannelHistoryEntryOut, ChannelOut, WorkspaceOut } from "../api/types";
import { ErrorText, LoadError } from "../common/ErrorText";
import { messageOf, useLoad } from "../common/useLoad";
import { channelsApi, webhookUrl } from "./api";

type Platform = "slack" | "telegram" | "discord" | "matrix";

// `inbound`: the key the platform's webhook deliveries are checked with; Matrix has no webhook (the bot
// reads its rooms through /sync), so no inbound key and no URL to paste, but a homeserver URL.
type PlatformInfo = {
  label: string;
  inbound: { key: "signingSecret" | "secretToken" | "publicKey"; label: string; hint: string } | null;
  token: string;
  console: string | null;
};

const PLATFORMS: Record<Platform, PlatformInfo> = {
  slack: {
    label: "Slack",
    token: "Bot User OAuth Token (xoxb-…), under OAuth & Permissions.",
    inbound: { key: "signingSecret", label: "Signing secret", hint: "Basic Information → App Credentials." },
    console: "Event Subscriptions → Request URL (and Interactivity & Shortcuts → Request URL, for approval buttons).",
  },
  telegram: {
    label: "Telegram",
    token: "The token @BotFather gave you (123456:ABC…).",
    inbound: { key: "secretToken", label: "Secret token", hint: "Choose one: 1 to 256 of A-Z, a-z, 0-9, _ and -. Pass it to setWebhook as secret_token." },
    console: "setWebhook with url=<this URL> and secret_token=<your secret token>.",
  },
  discord: {
    label: "Discord",
    token: "Bot → Token, in the Developer Portal.",
    inbound: { key: "publicKey", label: "Public key", hint: "General Information → Public Key (64 hex digits)." },
    console: "General Information → Interactions Endpoint URL.",
  },
  matrix: {
    label: "Matrix",
    token: "The bot user's access token (log the bot in, or Settings → Help & About → Access Token in Element).",
    inbound: null,
    console: null,
  },
};

type Draft = {
  platform: Platform; name: string; botToken: string; inboundKey: string; botUserId: string; homeserver: string;
  allowedUsers: string; approvers: string; workspaceId: string;
};

const EMPTY: Draft = { platform: "slack", name: "", botToken: "", inboundKey: "", botUserId: "", homeserver: "", allowedUsers: "", approvers: "", workspaceId: "" };
const STEPS = ["Platform", "Credentials", "People and workspace"] as const;

const lines = (text: string) => text.split(/[\s,]+/).map((line) => line.trim()).filter(Boolean);

function AddChannelForm(props: { workspaces: WorkspaceOut[]; onAdded: (channel: ChannelOut) => Promise<void>; onCancel: () => void }) {
  const id = useId();
  const [draft, setDraft] = useState<Draft>(EMPTY);
  const [step, setStep] = useState(0);
  const [error, setError] = useState<string | null>(null);
  const [saving, setSaving] = useState(false);
  const platform = PLATFORMS[draft.platform];
  const set = (changes: Partial<Draft>) => setDraft({ ...draft, ...changes });

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    if (step < STEPS.length - 1) {
      setStep(step + 1);
      return;
    }
    setSaving(true);
    setError(null);
    try {
      const created = await channelsApi.create({
        name: draft.name,
        platform: draft.platform,
        credentials: platform.inbound ? { botToken: draft.botToken, [platform.inbound.key]: draft.inboundKey } : { botToken: draft.botToken },
        ...(draft.platform === "matrix" ? { apiBaseUrl: draft.homeserver } : {}),
        allowedUsers: lines(draft.allowedUsers),
        approvers: lines(draft.approvers),
        ...(draft.botUserId ? { botUserId: draft.botUserId } : {}),
        ...(draft.workspaceId ? { workspaceId: draft.workspaceId } : {}),
      });
      setDraft(EMPTY);
      await props.onAdded(created);
    } catch (caught) {
      setError(messageOf(caught));
    } finally {
      setSaving(false);
    }
  };

  return (
    <form className="card settings-form" onSubmit={(event) => void submit(event)} aria-label="New channel connection">
      <p className="muted small-text" aria-live="polite">Step {step + 1} of {STEPS.length}: {STEPS[step]}</p>
      {step === 0 ? (
        <>
          <div className="field">
            <label className="field-label" htmlFor={`${id}-platform`}>Platform</label>
            <select id={`${id}-platform`} value={draft.platform} onChange={(event) => set({ platform: event.target.value as Platform, inboundKey: "" })}>
              {(Object.keys(PLATFORMS) as Platform[]).map((key) => <option key={key} value={key}>{PLATFORMS[key].label}</option>)}
            </select>
          </div>
          <div className="field">
            <label className="field-label" htmlFor={`${id}-name`}>Name</label>
            <input id={`${id}-name`} value={draft.name} maxLength={64} required onChange={(event) => set({ name: event.target.value })} />
          </div>
        </>
      ) : null}
      {step === 1 ? (
        <>
          <div className="field">
            <label className="field-label" htmlFor={`${id}-token`}>Bot token</label>
            <input id={`${id}-token`} type="password" autoComplete="off" value={draft.botToken} maxLength={4000} required
              onChange={(event) => set({ botToken: event.target.value })} />
            <span className="field-hint">{platform.token} Kept in the secrets service and never shown again.</span>
          </div>
          {platform.inbound ? (
            <div className="field">
              <label className="field-label" htmlFor={`${id}-inbound`}>{platform.inbound.label}</label>
              <input id={`${id}-inbound`} type="password" autoComplete="off" value={draft.inboundKey} maxLength={4000} required
                onChange={(event) => set({ inboundKey: event.target.value })} />
              <span className="field-hint">{platform.inbound.hint}</span>
            </div>
          ) : (
            <div className="field">
              <label className="field-label" htmlFor={`${id}-homeserver`}>Homeserver URL</label>
              <input id={`${id}-homeserver`} type="url" value={draft.homeserver} maxLength={2000} required
                onChange={(event) => set({ homeserver: event.target.value })} />
              <span className="field-hint">Its client-server API, e.g. https://matrix.example.org.</span>
            </div>
          )}
          <div className="field">
            <label className="field-label" htmlFor={`${id}-bot`}>{draft.platform === "matrix" ? "Bot user id" : "Bot user id (optional)"}</label>
            <input id={`${id}-bot`} value={draft.botUserId} maxLength={64} required={draft.platform === "matrix"}
              onChange={(event) => set({ botUserId: event.target.value })} />
            <span className="field-hint">The bot's own user id{draft.platform === "matrix" ? " (@name:server)" : ""}: its own messages are ignored.</span>
          </div>
        </>
      ) : null}
      {step === 2 ? (
        <>
          <div className="field">
            <label className="field-label" htmlFor={`${id}-allowed`}>Allowed users</label>
            <textarea id={`${id}-allowed`} rows={2} value={draft.allowedUsers} onChange={(event) => set({ allowedUsers: event.target.value })} />
            <span className="field-hint">Platform user ids, one a line. Nobody else can talk to the bot; empty means nobody.</span>
          </div>
          <div className="field">
            <label className="field-label" htmlFor={`${id}-approvers`}>Approvers</label>
            <textarea id={`${id}-approvers`} rows={2} value={draft.approvers} onChange={(event) => set({ approvers: event.target.value })} />
            <span className="field-hint">Platform user ids whose Approve / Deny / Allow for this session presses count.</span>
          </div>
          <div className="field">
            <label className="field-label" htmlFor={`${id}-workspace`}>Workspace</label>
            <select id={`${id}-workspace`} value={draft.workspaceId} onChange={(event) => set({ workspaceId: event.target.value })}>
              <option value="">The default workspace</option>
              {props.workspaces.map((workspace) => <option key={workspace.id} value={workspace.id}>{workspace.name}</option>)}
            </select>
          </div>
        </>
      ) : null}
      <ErrorText error={error} />
      <div className="form-actions">
        {step > 0 ? <button type="button" className="ghost" onClick={() => setStep(step - 1)}>Back</button> : null}
        <button type="submit" disabled={saving}>{step < STEPS.length - 1 ? "Next" : "Create connection"}</button>
        <button type="button" className="ghost" onClick={props.onCancel}>Cancel</button>
      </div>
    </form>
  );
}

function WebhookUrl(props: { channel: ChannelOut }) {
  const id = useId();
  const console = PLATFORMS[props.channel.platform].console;
  if (console === null) {
    return <p className="field-hint">No webhook: the bot reads its rooms itself. Invite {props.channel.botUserId} to a room (as one of the allowed users).</p>;
  }
  return (
    <div className="field">
      <label className="field-label" htmlFor={`${id}-webhook`}>Webhook URL</label>
      <input id={`${id}-webhook`} readOnly value={webhookUrl(props.channel.id)} onFocus={(event) => event.target.select()} />
      <span className="field-hint">Paste it in {console}</span>
    </div>
  );
}

function History(props: { channelId: string }) {
  const history = useLoad(["channel-history", props.channelId], () => channelsApi.history(props.channelId), { fresh: true });
  const entries: ChannelHistoryEntryOut[] = history.data?.entries ?? [];
  return (
    <div className="stack" data-testid="channel-history">
      <div className="section-head">
        <h3>Recent traffic</h3>
        <button type="button" className="ghost small" onClick={() => void history.reload()}>Refresh</button>
      </div>
      <LoadError what="the history" error={history.error} />
      {history.data && entries.length === 0 ? <p className="muted">Nothing yet.</p> : null}
      <ul className="grant-list small-text">
        {entries.map((entry) => (
          <li key={entry.id} data-direction={entry.direction}>
            <span className={entry.direction === "error" ? "badge warn" : "badge"}>{entry.direction}</span>{" "}
            <span className="muted">{new Date(entry.createdAt).toLocaleString()}</span>{" "}
            {entry.platformUser ? <span className="muted">{entry.platformUser}: </span> : null}
            {entry.text.slice(0, 300)}
          </li>
        ))}
      </ul>
    </div>
  );
}

function ChannelCard(props: { channel: ChannelOut; onChanged: () => Promise<void>; onError: (message: string) => void }) {
  const { channel } = props;
  const [showHistory, setShowHistory] = useState(false);
  const act = async (what: string, work: () => Promise<unknown>) => {
    try {
      await work();
    } catch (caught) {
      props.onError(`Could not ${what} ${channel.name}: ${messageOf(caught)}`);
    }
    await props.onChanged();
  };
  return (
    <li className="card" data-testid="channel">
      <div className="task-head">
        <strong>{channel.name}</strong>
        <span className="badge">{PLATFORMS[channel.platform].label}</span>
        {channel.credentialsSet ? <span className="badge">credentials set</span> : null}
        {channel.enabled ? null : <span className="badge warn">disabled</span>}
      </div>
      <p className="small-text">
        Allowed users: {channel.allowedUsers.length ? channel.allowedUsers.join(", ") : "nobody"} · Approvers:{" "}
        {channel.approvers.length ? channel.approvers.join(", ") : "nobody"} · Workspace: {channel.workspaceId || "default"}
      </p>
      <WebhookUrl channel={channel} />
      <div className="task-actions">
        <button type="button" className="ghost small" onClick={() => setShowHistory(!showHistory)}>{showHistory ? "Hide traffic" : "Traffic"}</button>
        <button type="button" className="ghost small" onClick={() => void act("change", () => channelsApi.update(channel.id, { enabled: !channel.enabled }))}>
          {channel.enabled ? "Disable" : "Enable"}
        </button>
        <button type="button" className="ghost small danger-text" onClick={() => void act("delete", () => channelsApi.remove(channel.id))}>Delete</button>
      </div>
      {showHistory ? <History channelId={channel.id} /> : null}
    </li>
  );
}

export default function ChannelsPage(props: { workspaces: WorkspaceOut[] }) {
  const channels = useLoad(["channels"], channelsApi.list);
  const [adding, setAdding] = useState(false);
  const [created, setCreated] = useState<ChannelOut | null>(null);
  const [actionError, setActionError] = useState<string | null>(null);

  const added = async (channel: ChannelOut) => {
    setAdding(false);
    setCreated(channel);
    await channels.reload();
  };

  return (
    <div className="page tasks-page">
      <h1>Channels</h1>
      <p className="muted">Talk to popagent from Slack, Telegram, Discord and Matrix: each conversation and thread is a chat session, replies stream into it, and approvals arrive as buttons.</p>
      {actionError ? <p role="alert" className="banner bad">{actionError}</p> : null}
      <LoadError what="channels" error={channels.error} />
      {created ? (
        <div role="status" className="card">
          <p><strong>{created.name}</strong> is connected on popagent's side. Last step, in {PLATFORMS[created.platform].label}:</p>
          <WebhookUrl channel={created} />
        </div>
      ) : null}
      <section className="stack" aria-label="Channel connections">
        <div className="section-head">
          <h2>Connections</h2>
          <button type="button" className="ghost small" onClick={() => { setCreated(null); setAdding(true); }}>Add connection</button>
        </div>
        {adding ? <AddChannelForm workspaces={props.workspaces} onAdded={added} onCancel={() => setAdding(false)} /> : null}
        <ul className="task-list" data-testid="channel-list">
          {channels.data?.channels.length === 0 ? <li className="muted">No connections.</li> : null}
          {channels.data?.channels.map((channel) => (
            <ChannelCard key={channel.id} channel={channel} onChanged={channels.reload} onError={setActionError} />
          ))}
        </ul>
      </section>
    </div>
  );
}
