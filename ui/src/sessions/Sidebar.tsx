import { useEffect, useId, useRef, useState, type FormEvent } from "react";
import { api } from "../api/client";
import type { SessionSummary, WorkspaceOut } from "../api/types";
import { useConfirm } from "../common/confirm";
import { Icon } from "../common/Icon";
import { messageOf } from "../common/useLoad";
import { href, navigate } from "../route";

function when(iso: string): string {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  const today = new Date();
  return date.toDateString() === today.toDateString()
    ? date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : date.toLocaleDateString();
}

export function Sidebar(props: {
  sessions: SessionSummary[] | undefined;
  loadError: Error | undefined;
  archived: boolean;
  onArchivedChange: (archived: boolean) => void;
  workspaces: WorkspaceOut[];
  workspaceId: string;
  onWorkspaceChange: (workspaceId: string) => void;
  currentId: string | null;
  onChanged: () => void;
  onNavigate: () => void;
}) {
  const filterId = useId();
  const [error, setError] = useState<string | null>(null);
  const [dialog, confirm] = useConfirm();

  // A new chat is only a page until its first message: nothing is stored before then.
  const createSession = () => {
    setError(null);
    if (props.archived) props.onArchivedChange(false);
    props.onNavigate();
    navigate({ page: "chat", sessionId: null });
    document.getElementById("composer-input")?.focus();
  };

  const act = async (what: string, run: () => Promise<unknown>) => {
    setError(null);
    try {
      await run();
      props.onChanged();
    } catch (caught) {
      setError(`Could not ${what}: ${messageOf(caught)}`);
    }
  };

  const remove = async (session: SessionSummary) => {
    const yes = await confirm({
      title: "Delete this chat permanently?",
      message: (
        <p>
          “{session.title || "Untitled chat"}” and its messages and hook audit are deleted for good. This cannot be undone.
        </p>
      ),
      confirmLabel: "Delete permanently",
      danger: true,
    });
    if (!yes) return;
    await act("delete the chat", async () => {
      await api.deleteSession(session.id);
      if (props.currentId === session.id) navigate({ page: "chat", sessionId: null });
    });
  };

  return (
    <nav className="sidebar-inner" aria-label="Sessions">
      <div className="sidebar-head">
        <h2>Chats</h2>
        <button type="button" className="primary small" onClick={createSession}>
          New chat
        </button>
      </div>
      <div className="sidebar-filters">
        <label htmlFor={filterId} className="field-label">
          Workspace
        </label>
        <select id={filterId} value={props.workspaceId} onChange={(event) => props.onWorkspaceChange(event.target.value)}>
          <option value="">All workspaces</option>
          {props.workspaces.map((workspace) => (
            <option key={workspace.id} value={workspace.id}>
              {workspace.name}
            </option>
          ))}
        </select>
        <div className="segmented" role="group" aria-label="Show">
          <button type="button" aria-pressed={!props.archived} onClick={() => props.onArchivedChange(false)}>
            Active
          </button>
          <button type="button" aria-pressed={props.archived} onClick={() => props.onArchivedChange(true)}>
            Archived
          </button>
        </div>
      </div>
      {error ? (
        <p role="alert" className="error-text small-text">
          {error}
        </p>
      ) : null}
      {props.loadError ? (
        <p role="alert" className="error-text small-text">
          Could not load chats: {props.loadError.message}
        </p>
      ) : null}
      <ul className="session-list" data-testid="session-list" data-archived={props.archived}>
        {props.sessions?.length === 0 ? (
          <li className="muted empty-list">{props.archived ? "No archived chats." : "No chats yet."}</li>
        ) : null}
        {props.sessions?.map((session) => (
          <SessionItem
            key={session.id}
            session={session}
            current={session.id === props.currentId}
            onNavigate={props.onNavigate}
            onRename={(title) => act("rename the chat", () => api.patchSession(session.id, { title }))}
            onArchive={(archived) =>
              act(archived ? "archive the chat" : "restore the chat", () => api.patchSession(session.id, { archived }))
            }
            onDelete={() => void remove(session)}
          />
        ))}
      </ul>
      {dialog}
    </nav>
  );
}

function SessionItem(props: {
  session: SessionSummary;
  current: boolean;
  onNavigate: () => void;
  onRename: (title: string) => Promise<void>;
  onArchive: (archived: boolean) => Promise<void>;
  onDelete: () => void;
}) {
  const { session } = props;
  const [renaming, setRenaming] = useState(false);
  const [draft, setDraft] = useState(session.title);
  const renameButton = useRef<HTMLButtonElement>(null);
  const input = useRef<HTMLInputElement>(null);
  const wasRenaming = useRef(false);

  useEffect(() => {
    if (renaming) input.current?.select();
    else if (wasRenaming.current) renameButton.current?.focus();
    wasRenaming.current = renaming;
  }, [renaming]);

  const save = async (event: FormEvent) => {
    event.preventDefault();
    const title = draft.trim();
    if (title && title !== session.title) await props.onRename(title);
    setRenaming(false);
  };

  const label = session.title || "Untitled chat";
  return (
    <li className={`session-item${props.current ? " current" : ""}`} data-testid="session-item" data-session-id={session.id}>
      {renaming ? (
        <form className="rename-form" onSubmit={(event) => void save(event)}>
          <label className="visually-hidden" htmlFor={`rename-${session.id}`}>
            New title
          </label>
          <input
            id={`rename-${session.id}`}
            ref={input}
            value={draft}
            maxLength={500}
            onChange={(event) => setDraft(event.target.value)}
            onKeyDown={(event) => {
              if (event.key === "Escape") {
                event.preventDefault();
                setRenaming(false);
              }
            }}
          />
          <button type="submit" className="small primary">
            Save
          </button>
          <button type="button" className="small ghost" onClick={() => setRenaming(false)}>
            Cancel
          </button>
        </form>
      ) : (
        <a
          href={href({ page: "chat", sessionId: session.id })}
          className="session-link"
          aria-current={props.current ? "page" : undefined}
          onClick={props.onNavigate}
        >
          <span className="session-title">
            {label}
            {session.titleLocked ? (
              <span className="lock" title="Renamed: later saves keep this title">
                <Icon name="lock" label="title locked" />
              </span>
            ) : null}
          </span>
          <span className="session-meta muted">
            {when(session.updatedAt)} · {session.messageCount} msg · {session.workspaceId}
          </span>
        </a>
      )}
      {renaming ? null : (
        <div className="session-actions">
          <button
            type="button"
            ref={renameButton}
            className="icon-button"
            aria-label={`Rename ${label}`}
            title="Rename"
            onClick={() => {
              setDraft(session.title);
              setRenaming(true);
            }}
          >
            <Icon name="pencil" />
          </button>
          <button
            type="button"
            className="icon-button"
            aria-label={`${session.archived ? "Restore" : "Archive"} ${label}`}
            title={session.archived ? "Restore" : "Archive"}
            onClick={() => void props.onArchive(!session.archived)}
          >
            <Icon name={session.archived ? "restore" : "archive"} />
          </button>
          <button
            type="button"
            className="icon-button danger-text"
            aria-label={`Delete ${label}`}
            title="Delete permanently"
            onClick={props.onDelete}
          >
            <Icon name="trash" />
          </button>
        </div>
      )}
    </li>
  );
}
