import { useQueryClient } from "@tanstack/react-query";
import { Suspense, lazy, useCallback, useEffect, useRef, useState } from "react";
import type { ModelsOut, WorkspaceOut } from "./api/types";
import { api } from "./api/client";
import { ChatPage } from "./chat/ChatPage";
import { initialModel, type ModelFix } from "./chat/ModelPicker";
import { ApiKeyDialog } from "./common/ApiKeyDialog";
import { useConfirm } from "./common/confirm";
import { clearUnsaved, hasUnsaved } from "./common/unsaved";
import { Icon } from "./common/Icon";
import { ThemePicker } from "./common/ThemePicker";
import { ShortcutsSheet, shortcutOf } from "./common/shortcuts";
import { useLoad } from "./common/useLoad";
import { PAGES } from "./pages";
import { pageIdOf, parseRoute, useRoute } from "./route";
import { Sidebar } from "./sessions/Sidebar";
// Tasks and settings are their own chunks: the chat's first paint does not wait for them.
const SettingsPage = lazy(() => import("./settings/SettingsPage").then((module) => ({ default: module.SettingsPage })));
const TasksPage = lazy(() => import("./tasks/TasksPage").then((module) => ({ default: module.TasksPage })));

// Loaded when a chat session is open: the browser panel polls the session's page.
const BrowserPanel = lazy(() => import("./browser/BrowserPanel").then((m) => ({ default: m.BrowserPanel })));

export function App() {
  const route = useRoute();
  const models = useLoad(["models"], api.models);
  const workspaces = useLoad(["workspaces"], api.workspaces);
  const [workspaceId, setWorkspaceId] = useState("");
  const [archived, setArchived] = useState(false);
  const sessions = useLoad(["sessions", archived, workspaceId], () => api.sessions(archived, workspaceId || undefined));
  const [drawerOpen, setDrawerOpen] = useState(false);
  // Narrow screens: the pages are a menu under a button (every name readable, none cut).
  const [navOpen, setNavOpen] = useState(false);
  // The model for new turns: the persisted default until the user picks another (for this tab);
  // a listed model when the model gateway does not offer the default (the notice asks to save one).
  const [model, setModel] = useState("");
  useEffect(() => {
    // Functional: an open chat may have just restored its own model in this same commit.
    const data = models.data;
    if (data) setModel((current) => current || initialModel(data));
  }, [models.data]);
  const refreshModels = useCallback(() => void models.reload(), [models.reload]);
  const queries = useQueryClient();
  // The model notice's one click: the pick as the default, unlisted overrides back to inherit. What
  // GET /api/models and the settings pages (the agents' "not offered" badges) show is read again
  // even when a save failed half way, so the notice names what is still unlisted.
  const fixModels = useCallback(
    async (fix: ModelFix) => {
      try {
        if (fix.defaultModel) await api.patchAgentRuntime({ defaultModel: fix.defaultModel });
        for (const agentId of fix.inheritAgents) await api.patchAgent(agentId, { model: null });
      } finally {
        await Promise.all([models.reload(), queries.invalidateQueries({ queryKey: ["settings"] }), queries.invalidateQueries({ queryKey: ["agents"] })]);
      }
    },
    [models.reload, queries],
  );
  const main = useRef<HTMLElement>(null);

  // Following a link inside the app (or a shortcut's page) with unsaved edits asks first (closing
  // the tab asks too).
  const [leaveDialog, confirm] = useConfirm();
  const leaveTo = useCallback(
    async (target: string): Promise<boolean> => {
      const unsaved = hasUnsaved();
      if (!unsaved.length) {
        window.location.hash = target;
        return true;
      }
      return confirm({
        title: "Leave without saving?",
        message: <p>Your changes to {unsaved.join(", ")} are not saved yet. Leave this page and lose them?</p>,
        confirmLabel: "Leave without saving",
        danger: true,
      }).then((leave) => {
        if (leave) {
          clearUnsaved();
          window.location.hash = target;
        }
        return leave;
      });
    },
    [confirm],
  );
  useEffect(() => {
    const onClick = (event: MouseEvent) => {
      const link = (event.target as Element | null)?.closest?.("a[href^='#']");
      const target = link?.getAttribute("href");
      if (!target || target === window.location.hash || !hasUnsaved().length || event.defaultPrevented) return;
      event.preventDefault();
      void leaveTo(target);
    };
    document.addEventListener("click", onClick, true);
    return () => document.removeEventListener("click", onClick, true);
  }, [leaveTo]);

  // Moving to another page puts focus on its main region, as a page load would.
  const page = route.page === "chat" ? `chat:${route.sessionId ?? ""}` : pageIdOf(route);
  const firstPage = useRef(true);
  useEffect(() => {
    setDrawerOpen(false);
    if (firstPage.current) {
      firstPage.current = false;
      return;
    }
    if (route.page !== "chat") main.current?.focus();
  }, [page, route.page]);

  // Keyboard shortcuts (common/shortcuts.tsx lists them in the `?` sheet).
  const [sheetOpen, setSheetOpen] = useState(false);
  // Ctrl/⌘+K asked for the chat search: focused once the chat page, and on a narrow screen the
  // drawer holding it, are shown.
  const [searchWanted, setSearchWanted] = useState(false);
  useEffect(() => {
    const onKey = (event: KeyboardEvent) => {
      const action = shortcutOf(event);
      if (!action) return;
      if (action === "composer") {
        const composer = document.getElementById("composer-input");
        if (!composer) return;
        composer.focus();
      } else if (action === "sheet") {
        setSheetOpen(true);
      } else if (action === "newChat") {
        setArchived(false);
        const now = parseRoute(window.location.hash);
        // A new chat's message box focuses itself when it appears; on the new chat already, this one.
        if (now.page === "chat" && !now.sessionId) document.getElementById("composer-input")?.focus();
        else void leaveTo("#/chat");
      } else if (parseRoute(window.location.hash).page === "chat") {
        setSearchWanted(true);
      } else {
        void leaveTo("#/chat").then((left) => left && setSearchWanted(true));
      }
      event.preventDefault();
    };
    document.addEventListener("keydown", onKey);
    return () => document.removeEventListener("keydown", onKey);
  }, [leaveTo]);
  useEffect(() => {
    if (!searchWanted || route.page !== "chat") return;
    const search = document.getElementById("chat-search");
    if (!search) return;
    // Hidden in the closed drawer (narrow screens): open it first, then this runs again.
    if (getComputedStyle(search).visibility === "hidden") {
      if (!drawerOpen) setDrawerOpen(true);
      return;
    }
    search.focus();
    setSearchWanted(false);
  }, [searchWanted, route.page, drawerOpen]);

  // Every sessions list (active, archived, per workspace) is stale after a change.
  const refreshSessions = useCallback(() => void queries.invalidateQueries({ queryKey: ["sessions"] }), [queries]);
  const sessionId = route.page === "chat" ? route.sessionId : null;

  return (
    <div className={`app${drawerOpen ? " drawer-open" : ""}`}>
      <a href="#main" className="skip-link" onClick={(event) => { event.preventDefault(); main.current?.focus(); }}>
        Skip to content
      </a>
      <header className="topbar">
        {route.page === "chat" ? (
          <button
            type="button"
            className="icon-button drawer-toggle"
            aria-label={drawerOpen ? "Hide chats" : "Show chats"}
            aria-expanded={drawerOpen}
            aria-controls="sidebar"
            onClick={() => setDrawerOpen((open) => !open)}
          >
            <Icon name={drawerOpen ? "close" : "menu"} />
          </button>
        ) : null}
        <a href="#/chat" className="brand">
          popagent
        </a>
        <button
          type="button"
          className="nav-toggle"
          aria-expanded={navOpen}
          aria-controls="main-nav"
          onClick={() => setNavOpen((open) => !open)}
          onKeyDown={(event) => {
            if (event.key === "Escape") setNavOpen(false);
          }}
        >
          Pages
        </button>
        <nav
          id="main-nav"
          className={`main-nav${navOpen ? " open" : ""}`}
          aria-label="Main"
          onKeyDown={(event) => {
            if (event.key === "Escape") setNavOpen(false);
          }}
        >
          {PAGES.map((entry) => (
            <a
              key={entry.id}
              href={`#/${entry.id}`}
              aria-current={pageIdOf(route) === entry.id ? "page" : undefined}
              onClick={() => setNavOpen(false)}
            >
              {entry.label}
            </a>
          ))}
        </nav>
        <ThemePicker />
      </header>
      <div className="layout">
        {route.page === "chat" ? (
          <aside id="sidebar" className="sidebar">
            <Sidebar
              sessions={sessions.data?.sessions}
              loadError={sessions.error}
              archived={archived}
              onArchivedChange={setArchived}
              workspaces={workspaces.data?.workspaces ?? []}
              workspaceId={workspaceId}
              onWorkspaceChange={setWorkspaceId}
              currentId={sessionId}
              onChanged={refreshSessions}
              onNavigate={() => setDrawerOpen(false)}
            />
          </aside>
        ) : null}
        {drawerOpen ? <div className="scrim" aria-hidden="true" onClick={() => setDrawerOpen(false)} /> : null}
        <main id="main" ref={main} tabIndex={-1} className={`main ${pageIdOf(route)}`}>
          {route.page === "chat" ? (
            <ChatPage
              sessionId={route.sessionId}
              models={models.data}
              model={model}
              onModelChange={setModel}
              onFixModels={fixModels}
              workspaceId={workspaceId}
              workspaces={workspaces.data?.workspaces ?? []}
              onSessionsChanged={refreshSessions}
            />
          ) : null}
          {route.page === "chat" && route.sessionId ? (
            <Suspense fallback={null}>
              <BrowserPanel sessionId={route.sessionId} />
            </Suspense>
          ) : null}
          <Suspense fallback={<p className="page muted">Loading…</p>}>
            {route.page === "tasks" ? <TasksPage models={models.data} workspaces={workspaces.data?.workspaces ?? []} /> : null}
            {route.page === "settings" ? <SettingsPage section={route.section} models={models.data} onModelsChanged={refreshModels} /> : null}
          </Suspense>
          {route.page === "other" ? <OtherPage id={route.id} rest={route.rest} models={models.data} workspaces={workspaces.data?.workspaces ?? []} /> : null}
        </main>
      </div>
      <ApiKeyDialog />
      <ShortcutsSheet open={sheetOpen} onClose={() => setSheetOpen(false)} />
      {leaveDialog}
    </div>
  );
}

/** A page of pages.tsx drawn by its own `render`, behind Suspense for its lazy chunk. */
function OtherPage(props: { id: string; rest: string | null; models: ModelsOut | undefined; workspaces: WorkspaceOut[] }) {
  const entry = PAGES.find((candidate) => candidate.id === props.id);
  if (!entry?.render) {
    return (
      <div className="page">
        <h1>Page not found</h1>
        <p>
          There is no page at <code>#/{props.id}</code>. <a href="#/chat">Go to the chat</a>.
        </p>
      </div>
    );
  }
  return (
    <Suspense fallback={<p className="page muted">Loading…</p>}>
      {entry.render({ rest: props.rest, models: props.models, workspaces: props.workspaces })}
    </Suspense>
  );
}
