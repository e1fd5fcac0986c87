// Calls of the browser routes (/api/browser/*).
import { http, unwrap } from "../api/client";

const session = (sessionId: string) => ({ params: { path: { session_id: sessionId } } });

export const browserApi = {
  health: () => unwrap(http.GET("/api/browser/health")),
  sessions: () => unwrap(http.GET("/api/browser/sessions")),
  takeOver: (sessionId: string) => unwrap(http.POST("/api/browser/sessions/{session_id}/takeover", session(sessionId))),
  release: (sessionId: string) => unwrap(http.DELETE("/api/browser/sessions/{session_id}/takeover", session(sessionId))),
  /** The current page as a PNG blob. */
  screenshot: (sessionId: string) =>
    unwrap(http.GET("/api/browser/sessions/{session_id}/screenshot", { ...session(sessionId), parseAs: "blob" })),
};
