// The chat session's browser profile (chosen here, one session per profile) and its recording:
// one frame per browser operation the agent ran, each frame's screenshot viewable and downloadable.
import { useEffect, useState } from "react";
import type { BrowserProfileOut, BrowserRecordingFrameOut } from "../api/types";
import { browserApi } from "./api";

const message = (reason: unknown) => (reason instanceof Error ? reason.message : String(reason));

export function SessionProfile({ sessionId, onChange }: { sessionId: string; onChange?: (profile: string | null) => void }) {
  const [profiles, setProfiles] = useState<BrowserProfileOut[]>([]);
  const [chosen, setChosen] = useState<string | null>(null);
  const [error, setError] = useState("");

  useEffect(() => {
    let live = true;
    Promise.all([browserApi.profiles(), browserApi.sessionProfile(sessionId)]).then(
      ([listed, mine]) => {
        if (!live) return;
        setProfiles(listed.profiles);
        setChosen(mine.profile ?? null);
        onChange?.(mine.profile ?? null);
      },
      (reason: unknown) => live && setError(message(reason)),
    );
    return () => {
      live = false;
    };
  }, [sessionId, onChange]);

  const choose = async (value: string) => {
    try {
      const answer = value ? await browserApi.chooseProfile(sessionId, value) : await browserApi.releaseProfile(sessionId);
      setChosen(answer.profile ?? null);
      onChange?.(answer.profile ?? null);
      setError("");
    } catch (reason) {
      setError(message(reason));
    }
  };

  return (
    <div className="browser-profile" data-testid="browser-profile">
      <label>
        Profile{" "}
        <select value={chosen ?? ""} onChange={(event) => void choose(event.target.value)}>
          <option value="">None (the shared browser)</option>
          {profiles.map((profile) => (
            <option
              key={profile.name}
              value={profile.name}
              disabled={profile.sessionId !== null && profile.sessionId !== sessionId}
            >
              {profile.name}
              {profile.sessionId !== null && profile.sessionId !== sessionId ? " (in use by another chat)" : ""}
            </option>
          ))}
        </select>
      </label>
      {error ? <p className="error-text" role="alert">{error}</p> : null}
    </div>
  );
}

export function SessionRecording({ sessionId, frames }: { sessionId: string; frames: BrowserRecordingFrameOut[] }) {
  const [shown, setShown] = useState<{ seq: number; url: string } | null>(null);
  const [error, setError] = useState("");

  useEffect(() => () => {
    if (shown) URL.revokeObjectURL(shown.url);
  }, [shown]);

  const show = async (seq: number) => {
    try {
      const blob = await browserApi.frame(sessionId, seq);
      setShown({ seq, url: URL.createObjectURL(blob) });
      setError("");
    } catch (reason) {
      setError(message(reason));
    }
  };

  if (frames.length === 0) return <p className="muted" data-testid="browser-recording">No recorded browser steps yet.</p>;
  return (
    <details className="browser-recording" data-testid="browser-recording">
      <summary>Recording: {frames.length} step{frames.length === 1 ? "" : "s"}</summary>
      <ol>
        {frames.map((frame) => (
          <li key={frame.seq} value={frame.seq}>
            <button type="button" onClick={() => void show(frame.seq)} aria-pressed={shown?.seq === frame.seq}>
              {frame.operation}
            </button>{" "}
            <span className="muted">
              {new Date(frame.takenAt).toLocaleTimeString()}
              {frame.isError ? " · failed" : ""}
            </span>
          </li>
        ))}
      </ol>
      {error ? <p className="error-text" role="alert">{error}</p> : null}
      {shown ? (
        <figure>
          <img className="browser-screen" src={shown.url} alt={`The page after step ${shown.seq}`} />
          <figcaption>
            <a href={shown.url} download={`${sessionId}-${shown.seq}.png`}>
              Download step {shown.seq}
            </a>
          </figcaption>
        </figure>
      ) : null}
    </details>
  );
}
