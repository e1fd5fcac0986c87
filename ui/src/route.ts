// Hash routes: #/chat, #/chat/<session id>, #/memory/<session id>, #/tasks, #/settings/<section>.
import { useEffect, useState } from "react";

export type Route =
  | { page: "chat"; sessionId: string | null }
  | { page: "memory"; sessionId: string }
  | { page: "tasks" }
  | { page: "settings"; section: string | null };

export function parseRoute(hash: string): Route {
  const [page, rest] = hash.replace(/^#\/?/, "").split(/\/(.*)/s, 2);
  const arg = rest ? decodeURIComponent(rest) : null;
  if (page === "tasks") return { page: "tasks" };
  if (page === "memory" && arg) return { page: "memory", sessionId: arg };
  if (page === "settings") return { page: "settings", section: arg };
  return { page: "chat", sessionId: arg };
}

export function href(route: Route): string {
  switch (route.page) {
    case "chat":
      return route.sessionId ? `#/chat/${encodeURIComponent(route.sessionId)}` : "#/chat";
    case "memory":
      return `#/memory/${encodeURIComponent(route.sessionId)}`;
    case "tasks":
      return "#/tasks";
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
