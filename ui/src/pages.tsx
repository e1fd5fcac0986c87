// The app's pages, in nav order: one list. A new page is one entry here, its component in its
// own folder (ui/src/<area>/), lazy-loaded so the first load stays small:
//
//   const ObservabilityPage = lazy(() => import("./observability/ObservabilityPage"));
//   { id: "observability", label: "Observability", render: ({ rest }) => <ObservabilityPage path={rest} /> },
//
// `rest` is what follows `#/<id>/` in the address (null when nothing does). Chat, tasks and
// settings are drawn by App.tsx itself (they share its state); every other entry by `render`.
import { lazy, type ReactNode } from "react";
import type { ModelsOut, WorkspaceOut } from "./api/types";
import { ObservabilityPage } from "./observability";

const AutonomyPage = lazy(() => import("./autonomy/AutonomyPage"));
const SkillsPage = lazy(() => import("./skills/SkillsPage"));
const DocumentsPage = lazy(() => import("./documents/DocumentsPage"));
const SessionMemoryPage = lazy(() => import("./memory/SessionMemoryPage"));
const McpServersPage = lazy(() => import("./mcp/McpServersPage"));
const ChannelsPage = lazy(() => import("./channels/ChannelsPage"));

export type PageContext = {
  rest: string | null;
  models: ModelsOut | undefined;
  workspaces: WorkspaceOut[];
};

export type PageDef = {
  id: string;
  label: string;
  /** Draws the page; absent for the pages App.tsx draws (chat, tasks, settings). */
  render?: (context: PageContext) => ReactNode;
};

export const PAGES: PageDef[] = [
  { id: "chat", label: "Chat" },
  { id: "tasks", label: "Tasks" },
  { id: "skills", label: "Skills", render: ({ rest }) => <SkillsPage agentId={rest ? decodeURIComponent(rest) : null} /> },
  { id: "autonomy", label: "Autonomy", render: () => <AutonomyPage /> },
  { id: "mcp", label: "MCP", render: () => <McpServersPage /> },
  { id: "channels", label: "Channels", render: ({ workspaces }) => <ChannelsPage workspaces={workspaces} /> },
  { id: "settings", label: "Settings" },
  { id: "observability", label: "Observability", render: ({ rest }) => <ObservabilityPage path={rest ?? ""} /> },
  {
    id: "documents",
    label: "Docs",
    render: ({ rest, workspaces }) => (
      <DocumentsPage workspaceId={rest ? decodeURIComponent(rest) : null} workspaces={workspaces} />
    ),
  },
  { id: "memory", label: "Memory", render: ({ rest }) => <SessionMemoryPage sessionId={rest ? decodeURIComponent(rest) : ""} /> },
];
