// Contained self-update on the Autonomy page: whether it can run, the system schedules, and each
// attempt (delegations, verification, diff summary, the imported ref) with "Show diff" and "Delete ref".
import { useState } from "react";
import { ListSection } from "../common/lists";
import { stamp } from "../common/stamp";
import type { Loaded } from "../common/useLoad";
import type { AutonomySettingsOut, SelfUpdateAttemptOut, SelfUpdateOut } from "../api/types";
import { autonomyApi } from "./api";

const TONE: Record<string, string> = { running: "pending", imported: "ok", "no-op": "ok", refused: "bad", failed: "bad" };

function AttemptDiff(props: { id: string }) {
  const [text, setText] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const show = async () => {
    setError(null);
    try {
      const found = await autonomyApi.selfUpdateDiff(props.id);
      setText(found.diff + (found.truncated ? "\n… (cut at 256 KiB)" : ""));
    } catch (caught) {
      setError(caught instanceof Error ? caught.message : String(caught));
    }
  };
  return (
    <>
      {text === null ? (
        <button type="button" className="ghost small" onClick={() => void show()}>
          Show diff
        </button>
      ) : (
        <pre className="tool-body" aria-label="The imported change">
          {text.split("\n").map((line, index) => (
            <div
              key={index}
              className={line.startsWith("-") && !line.startsWith("---") ? "danger-text" : undefined}
              style={line.startsWith("+") && !line.startsWith("+++") ? { color: "var(--ok)" } : undefined}
            >
              {line}
            </div>
          ))}
        </pre>
      )}
      {error ? <p role="alert" className="banner bad">{error}</p> : null}
    </>
  );
}

function AttemptItem(props: { attempt: SelfUpdateAttemptOut; onAct: (what: string, run: () => Promise<unknown>) => void }) {
  const { attempt } = props;
  return (
    <li className="card" data-testid="self-update-attempt">
      <div className="task-head">
        <span className={`badge ${TONE[attempt.status] ?? ""}`}>{attempt.status}</span>
        <strong>{attempt.workspaceId}</strong>
        <span className="muted">attempt {attempt.attempt}</span>
        <span className="muted small-text">{stamp(attempt.createdAt)}</span>
      </div>
      <p className="muted small-text">
        {attempt.baseBranch ?? "?"} @ {attempt.baseCommit?.slice(0, 12) ?? "?"}
        {attempt.branch ? ` → ${attempt.branch}` : ""}
      </p>
      <p>
        <span className="muted">Delegations: </span>
        {attempt.delegations.length
          ? attempt.delegations.map((d) => `${d.agentId} ${d.status}`).join(", ")
          : "none"}
      </p>
      <p>
        <span className="muted">Verification: </span>
        {attempt.verification || "not reached"}
      </p>
      {attempt.diffStat ? <pre className="tool-body">{attempt.diffStat}</pre> : null}
      {attempt.stages.length ? (
        <p className="muted small-text">{attempt.stages.map((s) => `${s.stage} ${s.ms} ms`).join(" · ")}</p>
      ) : null}
      {attempt.ref ? (
        <>
          <p>
            <span className="muted">Imported ref: </span>
            <code>{attempt.ref}</code>
          </p>
          <div className="task-actions">
            <AttemptDiff id={attempt.id} />
            <button
              type="button"
              className="ghost small"
              onClick={() => props.onAct("delete the ref", () => autonomyApi.deleteSelfUpdateRef(attempt.id))}
            >
              Delete ref
            </button>
          </div>
        </>
      ) : null}
    </li>
  );
}

export function SelfUpdateSection(props: {
  state: Loaded<SelfUpdateOut>;
  settings: AutonomySettingsOut | undefined;
  onAct: (what: string, run: () => Promise<unknown>) => void;
}) {
  const { settings } = props;
  const schedules = props.state.data?.schedules ?? [];
  const on = settings?.evolutionEnabled && settings.selfUpdateEnabled;
  return (
    <>
      <section aria-labelledby="self-update-heading" className="stack">
        <div className="section-head">
          <h2 id="self-update-heading">Self-update</h2>
        </div>
        <p className="muted" data-testid="self-update-status">
          {settings === undefined
            ? "Reading the autonomy settings…"
            : on
              ? `On (${settings.selfUpdateCron}). Each run works in a local clone without remotes; a reviewed, verified commit is imported as a local ref under refs/popagent/self-update/ for you to merge. Nothing is pushed.`
              : "Off: no self-update runs. Turn on evolution and self-update in Settings → Autonomy."}
        </p>
        {on && schedules.length === 0 ? (
          <p className="banner warn" role="status">
            No workspace is scheduled: self-update needs a read-write supervisor and implementer, delegation-eligible
            implementer and reviewer, a reviewer with repository access, and a workspace that is a writable Git repository.
          </p>
        ) : null}
        {schedules.length ? (
          <ul className="task-list" data-testid="self-update-schedules">
            {schedules.map((schedule) => (
              <li key={schedule.id} className="card">
                <div className="task-head">
                  <span className="badge ok">system</span>
                  <strong>{schedule.workspaceId}</strong>
                  <code>{schedule.cron}</code>
                  <span className="muted small-text">next {schedule.nextRunAt ? stamp(schedule.nextRunAt) : "never"}</span>
                </div>
              </li>
            ))}
          </ul>
        ) : null}
      </section>
      <ListSection
        id="self-update-attempts"
        title="Self-update attempts"
        noun="self-update attempts"
        list={props.state}
        items={props.state.data?.attempts}
        empty="No self-update attempt yet."
        testId="self-update-attempts"
        renderItem={(attempt) => <AttemptItem key={attempt.id} attempt={attempt} onAct={props.onAct} />}
      />
    </>
  );
}
