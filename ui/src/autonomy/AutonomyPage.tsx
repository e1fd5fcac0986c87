// The evolution loop: recent signals (ignore, retry) and learned revisions (a diff of each, revert).
import { useState } from "react";
import { ListSection, useActions } from "../common/lists";
import { stamp } from "../common/stamp";
import { useLoad } from "../common/useLoad";
import { api } from "../api/client";
import type { RevisionOut, SignalOut } from "../api/types";
import { autonomyApi } from "./api";
import { contentText, lineDiff } from "./diff";
import { SelfUpdateSection } from "./SelfUpdate";

const STATUSES = ["", "pending", "claimed", "applied", "dismissed", "ignored", "dead_letter"];
const TONE: Record<string, string> = {
  pending: "pending",
  claimed: "pending",
  applied: "ok",
  dismissed: "warn",
  ignored: "warn",
  dead_letter: "bad",
};

function Diff(props: { revision: RevisionOut }) {
  const lines = lineDiff(contentText(props.revision.before), contentText(props.revision.after));
  return (
    <pre className="tool-body" aria-label="What this revision changed">
      {lines.map((line, index) => (
        <div
          key={index}
          className={line.kind === "removed" ? "danger-text" : line.kind === "same" ? "muted" : undefined}
          style={line.kind === "added" ? { color: "var(--ok)" } : undefined}
        >
          {line.kind === "added" ? "+ " : line.kind === "removed" ? "- " : "  "}
          {line.text}
        </div>
      ))}
    </pre>
  );
}

function SignalItem(props: { signal: SignalOut; onAct: (what: string, run: () => Promise<unknown>) => void }) {
  const { signal } = props;
  return (
    <li className="card">
      <div className="task-head">
        <span className={`badge ${TONE[signal.status] ?? ""}`}>{signal.status.replace("_", " ")}</span>
        <strong>{signal.agentId}</strong>
        <span className="muted">{signal.failureClass}</span>
        <span className="muted small-text">{stamp(signal.createdAt)}</span>
      </div>
      <p>
        <span className="muted">Goal: </span>
        {signal.goal}
      </p>
      <p>
        <span className="muted">Failure: </span>
        {signal.evidence}
      </p>
      <p className="muted small-text">
        Trace {signal.traceId} · attempt {signal.attempts} of {signal.maxAttempts}
        {signal.lastError ? ` · ${signal.lastError}` : ""}
      </p>
      <div className="task-actions">
        {signal.status === "pending" || signal.status === "dead_letter" ? (
          <button type="button" className="ghost small" onClick={() => props.onAct("ignore the signal", () => autonomyApi.ignoreSignal(signal.id))}>
            Ignore
          </button>
        ) : null}
        {signal.status === "dead_letter" ? (
          <button type="button" className="ghost small" onClick={() => props.onAct("retry the signal", () => autonomyApi.retrySignal(signal.id))}>
            Retry
          </button>
        ) : null}
      </div>
    </li>
  );
}

function RevisionItem(props: { revision: RevisionOut; onAct: (what: string, run: () => Promise<unknown>) => void }) {
  const { revision } = props;
  const revertible = revision.strategy !== "revert" && !revision.revertedById;
  return (
    <li className="card">
      <div className="task-head">
        <span className={`badge ${revision.strategy === "revert" ? "warn" : "ok"}`}>{revision.strategy.replaceAll("_", " ")}</span>
        <strong>{revision.targetKey}</strong>
        <span className="muted small-text">{stamp(revision.createdAt)}</span>
      </div>
      <p className="muted small-text">
        {revision.signalIds.length} signal{revision.signalIds.length === 1 ? "" : "s"} · traces {revision.traceIds.join(", ")}
        {revision.revertedById ? " · reverted" : ""}
      </p>
      <details>
        <summary>Change</summary>
        <Diff revision={revision} />
      </details>
      {revertible ? (
        <div className="task-actions">
          <button type="button" className="ghost small" onClick={() => props.onAct("revert the revision", () => autonomyApi.revert(revision.id))}>
            Revert
          </button>
        </div>
      ) : null}
    </li>
  );
}

export default function AutonomyPage() {
  const [status, setStatus] = useState("");
  const signals = useLoad(["autonomy", "signals", status], () => autonomyApi.signals({ status: status || undefined }));
  const revisions = useLoad(["autonomy", "revisions"], () => autonomyApi.revisions());
  const settings = useLoad(["settings", "autonomy"], () => api.autonomy());
  const off = settings.data?.evolutionEnabled === false;
  const selfUpdate = useLoad(["autonomy", "self-update"], () => autonomyApi.selfUpdate());
  const { act, banner } = useActions(() => Promise.all([signals.reload(), revisions.reload(), selfUpdate.reload()]));
  const onAct = (what: string, run: () => Promise<unknown>) => void act(what, run);

  return (
    <div className="page tasks-page">
      <h1>Autonomy</h1>
      <p className="muted">
        Failed turns become signals; learning picks code-owned strategies for them and writes overlays or learned
        skills, each an append-only revision you can revert. The autonomy settings switch it on and off.
      </p>
      {off ? (
        <p className="banner warn" role="status" data-testid="evolution-off">
          Evolution is off: failed turns are not recorded as signals and nothing is learned. Turn it on in{" "}
          <a href="#/settings/autonomy">Settings → Autonomy</a>.
        </p>
      ) : null}
      {banner}
      <ListSection
        id="signals"
        title="Signals"
        noun="signals"
        list={signals}
        items={signals.data?.signals}
        empty={off ? "No signals: evolution is off." : "No signals: no failed turn since evolution was turned on."}
        testId="signal-list"
        controls={
          <label>
            <span className="visually-hidden">Status</span>
            <select value={status} onChange={(event) => setStatus(event.target.value)}>
              {STATUSES.map((value) => (
                <option key={value} value={value}>
                  {value ? value.replace("_", " ") : "every status"}
                </option>
              ))}
            </select>
          </label>
        }
        renderItem={(signal) => <SignalItem key={signal.id} signal={signal} onAct={onAct} />}
      />
      <ListSection
        id="revisions"
        title="Revisions"
        noun="revisions"
        list={revisions}
        items={revisions.data?.revisions}
        empty="Nothing learned yet."
        testId="revision-list"
        renderItem={(revision) => <RevisionItem key={revision.id} revision={revision} onAct={onAct} />}
      />
      <SelfUpdateSection state={selfUpdate} settings={settings.data} onAct={onAct} />
    </div>
  );
}
