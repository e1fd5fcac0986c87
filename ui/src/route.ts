// Hash routes: #/chat, #/chat/<session id>, #/tasks, #/settings/<section>, #/autonomy, #/skills/<agent id>.
import { useEffect, useState } from "react";

export type Route =
  | { page: "chat"; sessionId: string | null }
  | { page: "tasks" }
  | { page: "settings"; section: string | null }
  | { page: "autonomy" }
  | { page: "skills"; agentId: string | null };

export function parseRoute(hash: string): Route {
  const [page, rest] = hash.replace(/^#\/?/, "").split(/\/(.*)/s, 2);
  const arg = rest ? decodeURIComponent(rest) : null;
  if (page === "tasks") return { page: "tasks" };
  if (page === "settings") return { page: "settings", section: arg };
  if (page === "autonomy") return { page: "autonomy" };
  if (page === "skills") return { page: "skills", agentId: arg };
  return { page: "chat", sessionId: arg };
}

export function href(route: Route): string {
  switch (route.page) {
    case "chat":
      return route.sessionId ? `#/chat/${encodeURIComponent(route.sessionId)}` : "#/chat";
    case "tasks":
      return "#/tasks";
    case "settings":
      return route.section ? `#/settings/${route.section}` : "#/settings";
    case "autonomy":
      return "#/autonomy";
    case "skills":
      return route.agentId ? `#/skills/${encodeURIComponent(route.agentId)}` : "#/skills";
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
