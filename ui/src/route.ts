// Hash routes: #/chat, #/chat/<session id>, #/tasks, #/settings/<section>, and
// #/<page>/<rest> for every other page of pages.tsx (its `id` is the first segment).
import { useEffect, useState } from "react";

export type Route =
  | { page: "chat"; sessionId: string | null }
  | { page: "tasks" }
  | { page: "settings"; section: string | null }
  | { page: "other"; id: string; rest: string | null };

export function parseRoute(hash: string): Route {
  const [page, rest] = hash.replace(/^#\/?/, "").split(/\/(.*)/s, 2);
  const arg = rest ? decodeURIComponent(rest) : null;
  if (page === "tasks") return { page: "tasks" };
  if (page === "settings") return { page: "settings", section: arg };
  if (page && page !== "chat") return { page: "other", id: page, rest: rest ?? null };
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
    case "other":
      return route.rest ? `#/${route.id}/${route.rest}` : `#/${route.id}`;
  }
}

/** The page a route shows: its first segment. */
export function pageIdOf(route: Route): string {
  return route.page === "other" ? route.id : route.page;
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
