import { lazy, Suspense, useCallback, useEffect, useRef, useState } from "react";
import { api } from "./api/client";
import { ChatPage } from "./chat/ChatPage";
import { initialModel } from "./chat/ModelPicker";
import { ApiKeyDialog } from "./common/ApiKeyDialog";
import { Icon } from "./common/Icon";
import { useLoad } from "./common/useLoad";
import { href, useRoute } from "./route";
import { Sidebar } from "./sessions/Sidebar";
import { SettingsPage } from "./settings/SettingsPage";
import { TasksPage } from "./tasks/TasksPage";

const SessionMemoryPage = lazy(() => import("./memory/SessionMemoryPage"));

export function App() {
  const route = useRoute();
  const models = useLoad(api.models, []);
  const workspaces = useLoad(api.workspaces, []);
  const [workspaceId, setWorkspaceId] = useState("");
  const [archived, setArchived] = useState(false);
  const sessions = useLoad(() => api.sessions(archived, workspaceId || undefined), [archived, workspaceId]);
  const [drawerOpen, setDrawerOpen] = useState(false);
  // The model for new turns: the persisted default until the user picks another (for this tab);
  // a listed model when the model gateway does not offer the default (the notice asks to save one).
  const [model, setModel] = useState("");
  useEffect(() => {
    if (!model && models.data) setModel(initialModel(models.data));
  }, [model, models.data]);
  const refreshModels = useCallback(() => void models.reload(), [models.reload]);
  const saveDefault = useCallback(
    async (picked: string) => {
      await api.patchAgentRuntime({ defaultModel: picked });
      await models.reload();
    },
    [models.reload],
  );
  const main = useRef<HTMLElement>(null);

  // Moving to another page puts focus on its main region, as a page load would.
  const page = route.page === "chat" ? `chat:${route.sessionId ?? ""}` : route.page;
  const firstPage = useRef(true);
  useEffect(() => {
    setDrawerOpen(false);
    if (firstPage.current) {
      firstPage.current = false;
      return;
    }
    if (route.page !== "chat") main.current?.focus();
  }, [page, route.page]);

  const refreshSessions = useCallback(() => void sessions.reload(), [sessions.reload]);
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
        <nav className="main-nav" aria-label="Main">
          <a href={href({ page: "chat", sessionId: null })} aria-current={route.page === "chat" ? "page" : undefined}>
            Chat
          </a>
          {sessionId || route.page === "memory" ? (
            <a
              href={href({ page: "memory", sessionId: route.page === "memory" ? route.sessionId : (sessionId ?? "") })}
              aria-current={route.page === "memory" ? "page" : undefined}
            >
              Memory
            </a>
          ) : null}
          <a href={href({ page: "tasks" })} aria-current={route.page === "tasks" ? "page" : undefined}>
            Tasks
          </a>
          <a href={href({ page: "settings", section: null })} aria-current={route.page === "settings" ? "page" : undefined}>
            Settings
          </a>
        </nav>
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
        <main id="main" ref={main} tabIndex={-1} className={`main ${route.page}`}>
          {route.page === "chat" ? (
            <ChatPage
              sessionId={route.sessionId}
              models={models.data}
              model={model}
              onModelChange={setModel}
              onSaveDefault={saveDefault}
              workspaceId={workspaceId}
              workspaces={workspaces.data?.workspaces ?? []}
              onSessionsChanged={refreshSessions}
            />
          ) : null}
          {route.page === "memory" ? (
            <Suspense fallback={<p className="muted">Loading…</p>}>
              <SessionMemoryPage sessionId={route.sessionId} />
            </Suspense>
          ) : null}
          {route.page === "tasks" ? <TasksPage models={models.data} workspaces={workspaces.data?.workspaces ?? []} /> : null}
          {route.page === "settings" ? <SettingsPage section={route.section} models={models.data} onModelsChanged={refreshModels} /> : null}
        </main>
      </div>
      <ApiKeyDialog />
    </div>
  );
}
