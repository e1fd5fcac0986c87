import { useMemo } from "react";
import type { HookRunOut } from "../api/types";

export type TurnGroup = { turnId: string | null; runs: HookRunOut[] };

/** Audit runs grouped by turn id, in the order each turn first appears (the API answers oldest first). */
export function groupByTurn(runs: HookRunOut[]): TurnGroup[] {
  const groups = new Map<string | null, HookRunOut[]>();
  for (const run of runs) {
    const list = groups.get(run.turnId);
    if (list) list.push(run);
    else groups.set(run.turnId, [run]);
  }
  return [...groups].map(([turnId, list]) => ({ turnId, runs: list }));
}

function time(iso: string): string {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleTimeString();
}

const OUTCOME_TONE: Record<string, string> = { pass: "ok", deny: "bad", modify: "warn", continue: "warn" };

export function HookRuns({ runs }: { runs: HookRunOut[] }) {
  return (
    <ol className="hook-runs">
      {runs.map((run) => (
        <li key={run.id} className="hook-run" data-testid="hook-run" data-outcome={run.outcome} data-event={run.event}>
          <span className="hook-event">{run.event}</span>
          <span className="hook-handler" title="handler">
            {run.handlerId}
          </span>
          <span className={`badge ${OUTCOME_TONE[run.outcome] ?? "pending"}`}>{run.outcome}</span>
          <span className="hook-duration muted">{run.durationMs} ms</span>
          <time className="hook-time muted" dateTime={run.createdAt}>
            {time(run.createdAt)}
          </time>
          {run.target ? <span className="hook-target muted">on {run.target}</span> : null}
          {run.failureClass ? <span className="badge bad">{run.failureClass}</span> : null}
          {run.signed ? null : (
            <span className="hook-unsigned muted" title="the request carried no webhook-signature (no secret)">
              unsigned
            </span>
          )}
          {run.reason ? <span className="hook-reason">{run.reason}</span> : null}
        </li>
      ))}
    </ol>
  );
}

function summary(runs: HookRunOut[]): string {
  const denied = runs.filter((run) => run.outcome === "deny").length;
  const failed = runs.filter((run) => run.failureClass).length;
  const parts = [`${runs.length} hook run${runs.length === 1 ? "" : "s"}`];
  if (denied) parts.push(`${denied} denied`);
  if (failed) parts.push(`${failed} failed`);
  return parts.join(", ");
}

/** The whole session's timeline: one collapsible group per turn. */
export function HookTimeline(props: { runs: HookRunOut[]; openTurn?: string | null }) {
  const groups = useMemo(() => groupByTurn(props.runs), [props.runs]);
  if (!groups.length) {
    return (
      <div className="muted hooks-empty" data-testid="hooks-empty">
        <p>No hook ran in this session yet.</p>
        <p>
          Hooks run only when the server has some configured: the hooks service reads them from <code>POPAGENT_HOOKS</code>, one JSON
          document such as <code>{'{"version": 1, "hooks": {"PreToolUse": [{"id": "policy", "type": "http", "url": "https://…", "matcher": ["getTime"], "secret": "…"}]}}'}</code>.
          Set it and restart the hooks service; each hook that runs then shows here, per turn, with its decision.
        </p>
      </div>
    );
  }
  return (
    <div className="hook-timeline">
      {groups.map((group) => (
        <details
          key={group.turnId ?? "none"}
          className="hook-turn"
          data-testid="hook-turn"
          data-turn-id={group.turnId ?? ""}
          open={props.openTurn !== undefined && props.openTurn === group.turnId}
        >
          <summary>
            <span className="hook-turn-id">{group.turnId ? `Turn ${group.turnId.slice(0, 8)}` : "Outside a turn"}</span>
            <span className="muted">{summary(group.runs)}</span>
            {group.runs.some((run) => run.outcome === "deny") ? <span className="badge bad">deny</span> : null}
          </summary>
          <HookRuns runs={group.runs} />
        </details>
      ))}
    </div>
  );
}
