// Calls of the browser routes (/api/browser/*). Shapes are the generated DTOs.
import { ApiError, reasonOf } from "../api/client";
import { authedFetch } from "../api/auth";
import type { components } from "../api/schema.gen";

type S = components["schemas"];
export type BrowserHealth = S["BrowserHealthOut"];
export type BrowserSession = S["BrowserSessionOut"];
export type BrowserSessions = S["BrowserSessionsOut"];

async function json<Out>(method: string, path: string): Promise<Out> {
  const response = await authedFetch(path, { method });
  const text = await response.text();
  let body: unknown = text;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    // not JSON: keep the text as the reason
  }
  if (!response.ok) throw new ApiError(response.status, reasonOf(response.status, body, response.statusText), body, {});
  return body as Out;
}

const enc = encodeURIComponent;

export const browserApi = {
  health: () => json<BrowserHealth>("GET", "/api/browser/health"),
  sessions: () => json<BrowserSessions>("GET", "/api/browser/sessions"),
  takeOver: (sessionId: string) => json<BrowserSession>("POST", `/api/browser/sessions/${enc(sessionId)}/takeover`),
  release: (sessionId: string) => json<BrowserSession>("DELETE", `/api/browser/sessions/${enc(sessionId)}/takeover`),
  /** The current page as a PNG blob. */
  screenshot: async (sessionId: string): Promise<Blob> => {
    const response = await authedFetch(`/api/browser/sessions/${enc(sessionId)}/screenshot`);
    if (!response.ok) {
      const text = await response.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        // keep the text
      }
      throw new ApiError(response.status, reasonOf(response.status, body, response.statusText), body, {});
    }
    return response.blob();
  },
};
