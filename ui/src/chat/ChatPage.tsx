import type { FileUIPart } from "ai";
import { useEffect, useRef, useState } from "react";
import { ApiError, api } from "../api/client";
import type { ModelsOut, SessionSummary, WorkspaceOut } from "../api/types";
import { ErrorText } from "../common/ErrorText";
import { messageOf, useLoad } from "../common/useLoad";
import { navigate } from "../route";
import type { FirstMessage } from "./attachments";
import { Composer } from "./Composer";
import { Conversation } from "./Conversation";
import { ModelNotice, ModelPicker, type ModelFix } from "./ModelPicker";
import { rememberModel } from "./models";

// The first message typed before a session existed (with the files attached to it), handed to the new session's view.
const firstMessages = new Map<string, FirstMessage>();

type Shared = {
  models: ModelsOut | undefined;
  model: string;
  onModelChange: (model: string) => void;
  onFixModels: (fix: ModelFix) => Promise<void>;
  onSessionsChanged: (changed?: SessionSummary) => void;
};

export function ChatPage(props: Shared & { sessionId: string | null; workspaceId: string; workspaces: WorkspaceOut[] }) {
  if (!props.sessionId) return <NewChat {...props} />;
  return <OpenSession key={props.sessionId} {...props} sessionId={props.sessionId} />;
}

function NewChat(props: Shared & { workspaceId: string; workspaces: WorkspaceOut[] }) {
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  // The repository the new session's agents work in: the sidebar's filter, else the default.
  const [workspace, setWorkspace] = useState(props.workspaceId);
  // Attaching a file needs the session: the first attachment creates it (the message is not sent yet).
  const created = useRef<Promise<SessionSummary> | null>(null);
  const createSession = () => {
    created.current ??= api.createSession({ title: "", ...(workspace ? { workspaceId: workspace } : {}) });
    return created.current;
  };
  const start = async (text: string, files: FileUIPart[]) => {
    setBusy(true);
    try {
      const session = await createSession();
      firstMessages.set(session.id, { text, files });
      rememberModel(session.id, props.model);
      props.onSessionsChanged(session);
      navigate({ page: "chat", sessionId: session.id });
    } catch (caught) {
      setError(messageOf(caught));
      setBusy(false);
    }
  };
  return (
    <div className="conversation">
      <div className="chat-toolbar">
        <ModelPicker models={props.models} value={props.model} onChange={props.onModelChange} />
        <label className="workspace-pick">
          <span>Workspace</span>
          <select
            data-testid="new-session-workspace"
            value={workspace}
            onChange={(event) => setWorkspace(event.target.value)}
            disabled={busy || created.current !== null}
          >
            <option value="">default (popagent)</option>
            {props.workspaces.map((item) => (
              <option key={item.id} value={item.id}>
                {item.name}
                {item.exists ? "" : " (no checkout)"}
              </option>
            ))}
          </select>
        </label>
      </div>
      <ModelNotice models={props.models} value={props.model} onFix={props.onFixModels} />
      <div className="messages" role="log" aria-label="Conversation">
        <div className="empty">
          <h1>New chat</h1>
          <p className="muted">Ask popagent anything. The chat is saved as a session you can find in the sidebar.</p>
          <ErrorText error={error && `Could not start a chat: ${error}`} />
        </div>
      </div>
      <div className="status-row" />
      <Composer
        busy={false}
        disabled={busy}
        onSend={(text, files) => void start(text, files)}
        onStop={() => undefined}
        attachTo={async () => (await createSession()).id}
      />
    </div>
  );
}

function OpenSession(props: Shared & { sessionId: string }) {
  const loaded = useLoad(["session", props.sessionId], () => api.session(props.sessionId), { fresh: true });
  const [firstMessage] = useState(() => firstMessages.get(props.sessionId));
  useEffect(() => {
    firstMessages.delete(props.sessionId);
  }, [props.sessionId]);
  if (loaded.error) {
    const gone = loaded.error instanceof ApiError && loaded.error.status === 404;
    return (
      <div className="conversation">
        <div className="empty" role="alert">
          <p>{gone ? "This chat no longer exists." : `Could not load this chat: ${loaded.error.message}`}</p>
          <a href="#/chat">Start a new chat</a>
        </div>
      </div>
    );
  }
  if (!loaded.data) {
    return (
      <div className="conversation">
        <p className="empty muted">Loading the chat…</p>
      </div>
    );
  }
  return (
    <Conversation
      session={loaded.data}
      models={props.models}
      model={props.model}
      onModelChange={props.onModelChange}
      onFixModels={props.onFixModels}
      onSaved={props.onSessionsChanged}
      {...(firstMessage ? { firstMessage } : {})}
    />
  );
}
