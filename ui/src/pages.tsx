// The app's pages, in nav order: one list. A new page is one entry here, its component in its
// own folder (ui/src/<area>/), lazy-loaded so the first load stays small:
//
//   const ObservabilityPage = lazy(() => import("./observability/ObservabilityPage"));
//   { id: "observability", label: "Observability", render: ({ rest }) => <ObservabilityPage path={rest} /> },
//
// `rest` is what follows `#/<id>/` in the address (null when nothing does). Chat, tasks and
// settings are drawn by App.tsx itself (they share its state); every other entry by `render`.
import type { ReactNode } from "react";
import type { ModelsOut, WorkspaceOut } from "./api/types";
import { ObservabilityPage } from "./observability";

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
  { id: "settings", label: "Settings" },
  { id: "observability", label: "Observability", render: ({ rest }) => <ObservabilityPage path={rest ?? ""} /> },
];
