// The browser beside the chat: the session's current page (a screenshot polled as the screencast),
// takeover/release, the session's browser profile and its recording. While the user holds
// takeover, the agent's browser operations pause. Shown while the browser is enabled or the session
// has a tab, a profile or a recording.
import { useEffect, useState } from "react";
import type { BrowserRecordingFrameOut } from "../api/types";
import { browserApi } from "./api";
import { SessionProfile, SessionRecording } from "./SessionBrowserDetails";
import "./browser.css";

// The screencast's pace while the session has a tab; without one, whether a tab opened is asked
// less often. Nothing is asked while the page is hidden (each poll is a request, and a trace).
const POLL_MS = 1500;
const IDLE_POLL_MS = 10_000;

export function BrowserPanel({ sessionId }: { sessionId: string }) {
  const [hasTab, setHasTab] = useState(false);
  const [takenOver, setTakenOver] = useState(false);
  const [image, setImage] = useState("");
  const [error, setError] = useState("");
  const [open, setOpen] = useState(true);
  const [enabled, setEnabled] = useState(false);
  const [profile, setProfile] = useState<string | null>(null);
  const [frames, setFrames] = useState<BrowserRecordingFrameOut[]>([]);

  useEffect(() => {
    let live = true;
    browserApi.health().then(
      (health) => live && setEnabled(health.enabled),
      () => undefined,
    );
    return () => {
      live = false;
    };
  }, []);

  useEffect(() => {
    let live = true;
    let url = "";
    let timer = 0;
    const tick = async () => {
      if (document.visibilityState === "hidden") return;
      try {
        const listed = await browserApi.sessions();
        const mine = listed.sessions.find((s) => s.sessionId === sessionId);
        if (!live) return;
        setHasTab(Boolean(mine));
        setTakenOver(Boolean(mine?.takenOver));
        schedule(mine ? POLL_MS : IDLE_POLL_MS);
        if (!open) return;
        const recording = await browserApi.recording(sessionId);
        if (!live) return;
        setFrames(recording.frames);
        if (!mine) return;
        const blob = await browserApi.screenshot(sessionId);
        if (!live) return;
        const next = URL.createObjectURL(blob);
        if (url) URL.revokeObjectURL(url);
        url = next;
        setImage(next);
        setError("");
      } catch (reason) {
        if (live) setError(reason instanceof Error ? reason.message : String(reason));
      }
    };
    let every = 0;
    const schedule = (ms: number) => {
      if (!live || ms === every) return;
      every = ms;
      window.clearInterval(timer);
      timer = window.setInterval(() => void tick(), ms);
    };
    const onVisible = () => {
      if (document.visibilityState === "visible") void tick();
    };
    void tick();
    schedule(POLL_MS);
    document.addEventListener("visibilitychange", onVisible);
    return () => {
      live = false;
      window.clearInterval(timer);
      document.removeEventListener("visibilitychange", onVisible);
      if (url) URL.revokeObjectURL(url);
    };
  }, [sessionId, open]);

  if (!hasTab && !error && !enabled && profile === null && frames.length === 0) return null;
  const toggle = async () => {
    try {
      const answer = takenOver ? await browserApi.release(sessionId) : await browserApi.takeOver(sessionId);
      setTakenOver(answer.takenOver);
    } catch (reason) {
      setError(reason instanceof Error ? reason.message : String(reason));
    }
  };
  return (
    <aside className="browser-panel" aria-label="Browser" data-testid="browser-panel">
      <div className="browser-panel-bar">
        <button type="button" aria-expanded={open} onClick={() => setOpen((o) => !o)}>
          Browser
        </button>
        {hasTab ? (
          <button type="button" onClick={() => void toggle()} aria-pressed={takenOver}>
            {takenOver ? "Release to the agent" : "Take over"}
          </button>
        ) : null}
      </div>
      {takenOver ? <p className="muted">You hold this browser: the agent's browser operations are paused.</p> : null}
      {error ? <p className="error-text" role="alert">{error}</p> : null}
      {open && image ? <img className="browser-screen" src={image} alt="The chat session's current browser page" /> : null}
      {open ? <SessionProfile sessionId={sessionId} onChange={setProfile} /> : null}
      {open ? <SessionRecording sessionId={sessionId} frames={frames} /> : null}
    </aside>
  );
}
