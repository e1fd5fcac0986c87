// Hash routes: #/chat, #/chat/<session id>, #/tasks, #/documents/<workspace id>, #/settings/<section>.
import { useEffect, useState } from "react";

export type Route =
  | { page: "chat"; sessionId: string | null }
  | { page: "tasks" }
  | { page: "documents"; workspaceId: string | null }
  | { page: "settings"; section: string | null };

export function parseRoute(hash: string): Route {
  const [page, rest] = hash.replace(/^#\/?/, "").split(/\/(.*)/s, 2);
  const arg = rest ? decodeURIComponent(rest) : null;
  if (page === "tasks") return { page: "tasks" };
  if (page === "documents") return { page: "documents", workspaceId: arg };
  if (page === "settings") return { page: "settings", section: arg };
  return { page: "chat", sessionId: arg };
}

export function href(route: Route): string {
  switch (route.page) {
    case "chat":
      return route.sessionId ? `#/chat/${encodeURIComponent(route.sessionId)}` : "#/chat";
    case "tasks":
      return "#/tasks";
    case "documents":
      return route.workspaceId ? `#/documents/${encodeURIComponent(route.workspaceId)}` : "#/documents";
    case "settings":
      return route.section ? `#/settings/${route.section}` : "#/settings";
  }
}

export function navigate(route: Route): void {
  window.location.hash = href(route);
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(window.location.hash));
  useEffect(() => {
    const update = () => setRoute(parseRoute(window.location.hash));
    window.addEventListener("hashchange", update);
    return () => window.removeEventListener("hashchange", update);
  }, []);
  return route;
}
