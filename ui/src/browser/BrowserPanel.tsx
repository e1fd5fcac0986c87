// The browser beside the chat: the session's current page (a screenshot polled as the screencast),
// takeover/release, the session's browser profile and its recording. While the user holds
// takeover, the agent's browser operations pause and the screenshot takes the user's clicks and
// keys (forwarded to the page: POST /api/browser/sessions/{id}/input). A tab that goes away says so.
// Shown while the browser is enabled or the session has a tab, a profile or a recording.
import { useEffect, useRef, useState, type KeyboardEvent, type MouseEvent } from "react";
import { ApiError } from "../api/client";
import type { BrowserRecordingFrameOut } from "../api/types";
import { browserApi } from "./api";
import { SessionProfile, SessionRecording } from "./SessionBrowserDetails";
import "./browser.css";

// The screencast's pace while the session has a tab; without one, whether a tab opened is asked
// less often. Nothing is asked while the page is hidden (each poll is a request, and a trace).
const POLL_MS = 1500;
const IDLE_POLL_MS = 10_000;
// Keys forwarded by name; other single characters are typed as text.
const NAMED_KEYS = new Set([
  "Enter", "Tab", "Backspace", "Delete", "Escape", "Home", "End", "PageUp", "PageDown",
  "ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight",
]);
const TAB_GONE =
  "This chat's browser tab is gone: it was closed, or the browser restarted. The agent opens a new one at its next browser step.";

function reasonOf(reason: unknown): string {
  if (reason instanceof ApiError && reason.status === 404) return TAB_GONE;
  return reason instanceof Error ? reason.message : String(reason);
}

export function BrowserPanel({ sessionId }: { sessionId: string }) {
  const [hasTab, setHasTab] = useState(false);
  const [takenOver, setTakenOver] = useState(false);
  const [image, setImage] = useState("");
  const [error, setError] = useState("");
  const [open, setOpen] = useState(true);
  const [enabled, setEnabled] = useState(false);
  const [profile, setProfile] = useState<string | null>(null);
  const [frames, setFrames] = useState<BrowserRecordingFrameOut[]>([]);
  const [gone, setGone] = useState(false);
  const [refresh, setRefresh] = useState(0);
  const hadTab = useRef(false);
  // The user's inputs go one after another, in the order they were made.
  const inputs = useRef<Promise<void>>(Promise.resolve());

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
        // A tab this panel showed is no longer listed: closed, or the browser restarted.
        if (mine) hadTab.current = true;
        setGone(!mine && hadTab.current);
        if (!mine) setImage("");
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
        if (live) setError(reasonOf(reason));
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
  }, [sessionId, open, refresh]);

  useEffect(() => {
    hadTab.current = false;
    setGone(false);
  }, [sessionId]);

  if (!hasTab && !gone && !error && !enabled && profile === null && frames.length === 0) return null;
  const send = (body: Parameters<typeof browserApi.input>[1]) => {
    inputs.current = inputs.current.then(async () => {
      try {
        await browserApi.input(sessionId, body);
        setError("");
        setRefresh((n) => n + 1);
      } catch (reason) {
        setError(reasonOf(reason));
      }
    });
  };
  const click = (event: MouseEvent<HTMLImageElement>) => {
    const shown = event.currentTarget;
    const box = shown.getBoundingClientRect();
    // The screenshot is taken at CSS scale: its natural size is the page's viewport.
    const x = ((event.clientX - box.left) * shown.naturalWidth) / box.width;
    const y = ((event.clientY - box.top) * shown.naturalHeight) / box.height;
    shown.focus();
    send({ click: { x: Math.max(0, x), y: Math.max(0, y) } });
  };
  const key = (event: KeyboardEvent<HTMLImageElement>) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (NAMED_KEYS.has(event.key)) {
      event.preventDefault();
      send({ key: event.key });
    } else if (event.key.length === 1) {
      event.preventDefault();
      send({ text: event.key });
    }
  };
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
      {takenOver ? (
        <p className="muted">
          You hold this browser: the agent's browser operations are paused. Click the page and type to use it.
        </p>
      ) : null}
      {gone && !hasTab ? (
        <p className="warn-text" role="status" data-testid="browser-gone">
          {TAB_GONE}
        </p>
      ) : null}
      {error ? <p className="error-text" role="alert" data-testid="browser-error">{error}</p> : null}
      {open && image && takenOver ? (
        // A held page takes the user's clicks and keys; the screenshot is what they act on.
        <img
          className="browser-screen interactive"
          src={image}
          alt="The chat session's browser page: click to click there, type to type into it"
          tabIndex={0}
          onClick={click}
          onKeyDown={key}
          data-testid="browser-screen"
        />
      ) : open && image ? (
        <img className="browser-screen" src={image} alt="The chat session's current browser page" data-testid="browser-screen" />
      ) : null}
      {open ? <SessionProfile sessionId={sessionId} onChange={setProfile} /> : null}
      {open ? <SessionRecording sessionId={sessionId} frames={frames} /> : null}
    </aside>
  );
}
