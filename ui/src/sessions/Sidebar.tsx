import * as Menu from "@radix-ui/react-dropdown-menu";
import { useEffect, useId, useMemo, useRef, useState, type FormEvent } from "react";
import { api } from "../api/client";
import { usePendingApprovals } from "../approvals/pending";
import type { MessageMatchOut, SessionSummary, WorkspaceOut } from "../api/types";
import { ErrorText, LoadError } from "../common/ErrorText";
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

type Group = { label: string; sessions: SessionSummary[] };

/** Today, Yesterday, Previous 7 days, then Earlier: by the last change, newest first. */
export function groupByDate(sessions: SessionSummary[], now = new Date()): Group[] {
  const day = (date: Date) => new Date(date.getFullYear(), date.getMonth(), date.getDate()).getTime();
  const today = day(now);
  const groups: Group[] = [
    { label: "Today", sessions: [] },
    { label: "Yesterday", sessions: [] },
    { label: "Previous 7 days", sessions: [] },
    { label: "Earlier", sessions: [] },
  ];
  for (const session of sessions) {
    const at = new Date(session.updatedAt);
    const days = Number.isNaN(at.getTime()) ? Infinity : Math.round((today - day(at)) / 86_400_000);
    const index = days <= 0 ? 0 : days === 1 ? 1 : days <= 7 ? 2 : 3;
    groups[index]?.sessions.push(session);
  }
  return groups.filter((group) => group.sessions.length);
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
  // Fixed: App's Ctrl/⌘+K shortcut focuses it.
  const searchId = "chat-search";
  const [search, setSearch] = useState("");
  const groups = useMemo(() => {
    const needle = search.trim().toLowerCase();
    const shown = (props.sessions ?? []).filter((session) => !needle || (session.title || "Untitled chat").toLowerCase().includes(needle));
    return groupByDate(shown);
  }, [props.sessions, search]);
  const [error, setError] = useState<string | null>(null);
  const [dialog, confirm] = useConfirm();
  const pending = usePendingApprovals();

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
      <ErrorText error={error} small />
      <LoadError what="chats" error={props.loadError} small />
      <div className="session-search">
        <label htmlFor={searchId} className="visually-hidden">
          Search chats
        </label>
        <Icon name="search" />
        <input
          id={searchId}
          type="search"
          placeholder="Search chats and messages"
          value={search}
          onChange={(event) => setSearch(event.target.value)}
          data-testid="session-search"
        />
      </div>
      <div className="session-list" data-testid="session-list" data-archived={props.archived}>
        {props.sessions?.length === 0 ? <p className="muted empty-list">{props.archived ? "No archived chats." : "No chats yet."}</p> : null}
        {props.sessions?.length && !groups.length ? <p className="muted empty-list">No chat title contains “{search.trim()}”.</p> : null}
        <MessageMatches query={search} onNavigate={props.onNavigate} />
        {groups.map((group) => (
          <section key={group.label} className="session-group" aria-label={group.label} data-testid="session-group" data-group={group.label}>
            <h3 className="session-group-label">{group.label}</h3>
            <ul>
              {group.sessions.map((session) => (
                <SessionItem
                  key={session.id}
                  session={session}
                  current={session.id === props.currentId}
                  pendingApprovals={pending.get(session.id)?.length ?? 0}
                  onNavigate={props.onNavigate}
                  onRename={(title) => act("rename the chat", () => api.patchSession(session.id, { title }))}
                  onArchive={(archived) =>
                    act(archived ? "archive the chat" : "restore the chat", () => api.patchSession(session.id, { archived }))
                  }
                  onDelete={() => void remove(session)}
                />
              ))}
            </ul>
          </section>
        ))}
      </div>
      {dialog}
    </nav>
  );
}

function SessionItem(props: {
  session: SessionSummary;
  current: boolean;
  pendingApprovals: number;
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
            {props.pendingApprovals ? (
              <span className="badge warn approval-badge" data-testid="approval-badge" data-count={props.pendingApprovals}>
                {props.pendingApprovals === 1 ? "needs approval" : `${props.pendingApprovals} approvals`}
              </span>
            ) : null}
          </span>
          <span className="session-meta muted">
            {when(session.updatedAt)} · {session.messageCount} msg · {session.workspaceId}
          </span>
        </a>
      )}
      {renaming ? null : (
        <Menu.Root modal={false}>
          <Menu.Trigger asChild>
            <button type="button" ref={renameButton} className="icon-button session-menu-button" aria-label={`Actions for ${label}`} data-testid="session-menu">
              <Icon name="more" />
            </button>
          </Menu.Trigger>
          <Menu.Portal>
            <Menu.Content className="menu" align="end" sideOffset={4}>
              <Menu.Item
                className="menu-item"
                onSelect={() => {
                  setDraft(session.title);
                  setRenaming(true);
                }}
              >
                <Icon name="pencil" /> Rename
              </Menu.Item>
              <Menu.Item className="menu-item" onSelect={() => void props.onArchive(!session.archived)}>
                <Icon name={session.archived ? "restore" : "archive"} /> {session.archived ? "Restore" : "Archive"}
              </Menu.Item>
              <Menu.Separator className="menu-separator" />
              <Menu.Item className="menu-item danger-text" onSelect={props.onDelete}>
                <Icon name="trash" /> Delete…
              </Menu.Item>
            </Menu.Content>
          </Menu.Portal>
        </Menu.Root>
      )}
    </li>
  );
}

// Searching the messages waits for a pause in typing, and for a query worth sending.
const SEARCH_PAUSE_MS = 300;
const MIN_SEARCH_CHARS = 2;

/** The words between << and >> of a search excerpt, marked. */
function Excerpt({ text }: { text: string }) {
  return (
    <>
      {text.split(/(<<.*?>>)/).map((piece, index) =>
        piece.startsWith("<<") && piece.endsWith(">>") ? <mark key={index}>{piece.slice(2, -2)}</mark> : piece,
      )}
    </>
  );
}

/** Messages of any chat whose text matches the search (full text, on the server), each a link to its chat. */
function MessageMatches(props: { query: string; onNavigate: () => void }) {
  const query = props.query.trim();
  const [found, setFound] = useState<{ query: string; matches: MessageMatchOut[] } | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    if (query.length < MIN_SEARCH_CHARS) {
      setFound(null);
      return;
    }
    let live = true;
    const timer = window.setTimeout(() => {
      api
        .searchMessages(query)
        .then((answer) => live && (setFound({ query, matches: answer.matches }), setError(null)))
        .catch((caught: unknown) => live && setError(`Could not search the messages: ${messageOf(caught)}`));
    }, SEARCH_PAUSE_MS);
    return () => {
      live = false;
      window.clearTimeout(timer);
    };
  }, [query]);
  if (query.length < MIN_SEARCH_CHARS) return null;
  return (
    <section className="session-group message-matches" aria-label="In messages" data-testid="message-matches">
      <h3 className="session-group-label">In messages</h3>
      <ErrorText error={error} small />
      {found && found.query === query && !found.matches.length ? <p className="muted empty-list">No message mentions “{query}”.</p> : null}
      <ul>
        {(found?.matches ?? []).map((match) => (
          <li key={`${match.sessionId}/${match.messageId}`}>
            <a href={href({ page: "chat", sessionId: match.sessionId })} onClick={props.onNavigate} className="message-match">
              <span className="message-match-title">
                {match.title || "Untitled chat"}
                {match.archived ? <span className="badge">archived</span> : null}
              </span>
              <span className="message-match-excerpt">
                {match.role === "user" ? "You: " : "popagent: "}
                <Excerpt text={match.excerpt} />
              </span>
            </a>
          </li>
        ))}
      </ul>
    </section>
  );
}
