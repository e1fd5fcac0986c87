// Calls of the browser routes (/api/browser/*).
import { http, unwrap } from "../api/client";

const session = (sessionId: string) => ({ params: { path: { session_id: sessionId } } });

export const browserApi = {
  health: () => unwrap(http.GET("/api/browser/health")),
  sessions: () => unwrap(http.GET("/api/browser/sessions")),
  takeOver: (sessionId: string) => unwrap(http.POST("/api/browser/sessions/{session_id}/takeover", session(sessionId))),
  release: (sessionId: string) => unwrap(http.DELETE("/api/browser/sessions/{session_id}/takeover", session(sessionId))),
  /** The user's click (CSS pixels of the page), text or key on the page they hold. */
  input: (sessionId: string, body: { click: { x: number; y: number } } | { text: string } | { key: string }) =>
    unwrap(http.POST("/api/browser/sessions/{session_id}/input", { ...session(sessionId), body })),
  /** The current page as a PNG blob. */
  screenshot: (sessionId: string) =>
    unwrap(http.GET("/api/browser/sessions/{session_id}/screenshot", { ...session(sessionId), parseAs: "blob" })),
  profiles: () => unwrap(http.GET("/api/browser/profiles")),
  sessionProfile: (sessionId: string) => unwrap(http.GET("/api/browser/sessions/{session_id}/profile", session(sessionId))),
  chooseProfile: (sessionId: string, profile: string) =>
    unwrap(http.PUT("/api/browser/sessions/{session_id}/profile", { ...session(sessionId), body: { profile } })),
  releaseProfile: (sessionId: string) =>
    unwrap(http.DELETE("/api/browser/sessions/{session_id}/profile", session(sessionId))),
  recording: (sessionId: string) => unwrap(http.GET("/api/browser/sessions/{session_id}/recordings", session(sessionId))),
  /** One recording frame's screenshot as a PNG blob. */
  frame: (sessionId: string, seq: number) =>
    unwrap(
      http.GET("/api/browser/sessions/{session_id}/recordings/{seq}", {
        params: { path: { session_id: sessionId, seq } },
        parseAs: "blob",
      }),
    ),
};
