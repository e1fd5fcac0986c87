// A tool call waiting for a person (state `approval-requested`): what it would do, why it asks,
// and Approve / Allow for this session / Deny. The answer goes to POST /api/approvals/{id}; the
// turn's stream goes on by itself (the same tool part later gets its output, or `output-denied`).
import { createContext, useContext, useEffect, useId, useRef, useState } from "react";
import { ApiError } from "../api/client";
import { messageOf } from "../common/useLoad";
import { DiffView } from "../chat/WorkspaceParts";
import { approvalsApi, type Approval, type ApprovalDecision } from "./api";
import { NotifyMe } from "./notify";
import { useRefreshApprovals, useSessionApprovals } from "./pending";

/** The open chat, for the approval cards of its messages: its session, and how an answer given
 * through the REST route is also put into the chat's own state (useChat's addToolApprovalResponse):
 * a stream that stays open goes on by itself; one the server ended while the turn waits is taken up
 * again by useChat once every request of the step is answered (sendAutomaticallyWhen). */
export type ApprovalChat = {
  sessionId: string;
  respond: (approvalId: string, approved: boolean, reason?: string) => void;
};
export const ApprovalSession = createContext<ApprovalChat | null>(null);

function text(value: unknown): string {
  return typeof value === "string" ? value : "";
}

function record(value: unknown): Record<string, unknown> {
  return value && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
}

/** An edit's old and new text as a small diff: removed lines, then added ones. */
function editDiff(path: string, before: string, after: string): string {
  const minus = before.split("\n").map((line) => `-${line}`);
  const plus = after.split("\n").map((line) => `+${line}`);
  return [`--- ${path}`, `+++ ${path}`, ...minus, ...plus].join("\n");
}

/** The call's arguments as a person checks them before saying yes. */
export function ApprovalArguments({ toolName, args }: { toolName: string; args: unknown }) {
  const fields = record(args);
  const path = text(fields.path);
  if (toolName === "mastra_workspace_write_file") {
    return (
      <div className="approval-args" data-testid="approval-args">
        <p>
          Write <code data-testid="approval-path">{path || "(no path)"}</code>
        </p>
        <pre className="approval-content" data-testid="approval-content" aria-label={`New content of ${path || "the file"}`}>
          {text(fields.content)}
        </pre>
      </div>
    );
  }
  if (toolName === "mastra_workspace_edit_file") {
    return (
      <div className="approval-args" data-testid="approval-args">
        <p>
          Edit <code data-testid="approval-path">{path || "(no path)"}</code>
          {fields.replace_all === true ? <span className="muted"> (every occurrence)</span> : null}
        </p>
        <DiffView diff={editDiff(path, text(fields.old_string), text(fields.new_string))} />
      </div>
    );
  }
  if (toolName === "mastra_workspace_execute_command") {
    const cwd = text(fields.cwd);
    return (
      <div className="approval-args" data-testid="approval-args">
        <pre className="approval-command" data-testid="approval-command">
          $ {text(fields.command)}
        </pre>
        {cwd && cwd !== "." ? <p className="muted">in {cwd}</p> : null}
        {fields.background === true ? <p className="muted">started in the background</p> : null}
      </div>
    );
  }
  if (toolName === "useBrowserSecret") {
    return (
      <dl className="readable-fields approval-args" data-testid="approval-args">
        {(
          [
            ["Secret", fields.name],
            ["Origin", fields.origin],
            ["Field", fields.element],
          ] as const
        )
          .filter(([, value]) => typeof value === "string" && value)
          .map(([label, value]) => (
            <div key={label} className="readable-field">
              <dt>{label}</dt>
              <dd>
                <code>{String(value)}</code>
              </dd>
            </div>
          ))}
      </dl>
    );
  }
  return (
    <pre className="approval-json" data-testid="approval-args">
      {JSON.stringify(args ?? {}, null, 2)}
    </pre>
  );
}

type Outcome =
  | { kind: "answered"; approval: Approval }
  | { kind: "conflict"; approval: Approval | null }
  | { kind: "error"; message: string };

const STATE_TEXT: Record<string, string> = {
  pending: "waiting for an answer",
  approved: "approved",
  denied: "denied",
  expired: "expired (not answered in time; counts as denied)",
};

function answeredText(approval: Approval): string {
  if (approval.state === "approved") {
    return approval.scope === "session"
      ? `Approved, and ${approval.toolName} is allowed for the rest of this session. The tool runs now.`
      : "Approved. The tool runs now.";
  }
  if (approval.state === "denied") return approval.answerReason ? `Denied: ${approval.answerReason}` : "Denied.";
  if (approval.state === "expired") return "Expired: it was not answered in time, so the call does not run.";
  return "Waiting for an answer.";
}

/** The approval card of a tool part in state `approval-requested`. */
export function ApprovalCard(props: { toolName: string; approvalId: string | undefined; input: unknown }) {
  const chat = useContext(ApprovalSession);
  const sessionId = chat?.sessionId ?? null;
  const told = useRef(false);
  const tell = (approval: Approval | null) => {
    if (!approval || approval.state === "pending" || told.current || !props.approvalId) return;
    told.current = true;
    chat?.respond(props.approvalId, approval.state === "approved", approval.answerReason ?? undefined);
  };
  const headingId = useId();
  const reasonId = useId();
  const listed = useSessionApprovals(sessionId ?? "");
  const refresh = useRefreshApprovals();
  const record = listed.data?.find((approval) => approval.id === props.approvalId) ?? null;
  const [outcome, setOutcome] = useState<Outcome | null>(null);
  const [sending, setSending] = useState<ApprovalDecision | null>(null);
  const [denying, setDenying] = useState(false);
  const [reason, setReason] = useState("");

  const answer = async (decision: ApprovalDecision) => {
    if (!props.approvalId) return;
    setSending(decision);
    try {
      const approval = await approvalsApi.answer(props.approvalId, decision, decision === "deny" ? reason.trim() : "");
      setOutcome({ kind: "answered", approval });
      setDenying(false);
      tell(approval);
    } catch (caught) {
      if (caught instanceof ApiError && caught.status === 409) {
        // Answered elsewhere (another tab, the API) or expired: show what the server has now.
        const current = await approvalsApi
          .list({ sessionId: sessionId ?? undefined })
          .then((list) => list.find((item) => item.id === props.approvalId) ?? null)
          .catch(() => null);
        setOutcome({ kind: "conflict", approval: current });
        tell(current);
      } else if (caught instanceof ApiError) {
        setOutcome({ kind: "error", message: `Not sent: ${caught.message} (HTTP ${caught.status}).` });
      } else {
        setOutcome({ kind: "error", message: `Not sent: ${messageOf(caught)}. Check the connection and try again.` });
      }
    } finally {
      setSending(null);
      refresh();
    }
  };

  const settled = outcome?.kind === "answered" || outcome?.kind === "conflict";
  // Already answered before this card could (another tab): the record says so.
  const answeredElsewhere = !outcome && record && record.state !== "pending" ? record : null;
  const args = record?.arguments ?? props.input;
  useEffect(() => {
    if (answeredElsewhere) tell(answeredElsewhere);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [answeredElsewhere?.state]);
  return (
    <section
      className="approval-card"
      role="region"
      aria-labelledby={headingId}
      data-testid="approval-card"
      data-approval-id={props.approvalId ?? ""}
      data-outcome={outcome?.kind === "answered" ? outcome.approval.state : outcome?.kind ?? answeredElsewhere?.state ?? "pending"}
    >
      <h3 id={headingId} className="approval-title">
        Approval needed: <code>{props.toolName}</code>
      </h3>
      {record ? (
        <p className="approval-why" data-testid="approval-reason">
          <span className="muted">Why it asks:</span> {record.reason || "no reason given"}{" "}
          <span className="muted">
            ({record.askedBy === "policy" ? "the agent's approval policy" : record.askedBy.startsWith("hook:") ? `hook ${record.askedBy.slice(5)}` : record.askedBy}
            {record.agentId ? `, agent ${record.agentId}` : ""})
          </span>
        </p>
      ) : listed.isFetching ? (
        <p className="muted">Loading why it asks…</p>
      ) : listed.error ? (
        <p className="muted">Could not load why it asks: {listed.error.message}</p>
      ) : null}
      <ApprovalArguments toolName={props.toolName} args={args} />
      {outcome?.kind === "answered" ? (
        <p className="approval-outcome" role="status" data-testid="approval-outcome">
          {answeredText(outcome.approval)}
        </p>
      ) : null}
      {outcome?.kind === "conflict" ? (
        <p className="approval-outcome" role="status" data-testid="approval-outcome">
          Already answered elsewhere
          {outcome.approval ? `: ${STATE_TEXT[outcome.approval.state] ?? outcome.approval.state}${outcome.approval.answerReason ? ` (${outcome.approval.answerReason})` : ""}.` : "."}
        </p>
      ) : null}
      {answeredElsewhere ? (
        <p className="approval-outcome" role="status" data-testid="approval-outcome">
          {answeredText(answeredElsewhere)}
        </p>
      ) : null}
      {outcome?.kind === "error" ? (
        <p className="error-text" role="alert" data-testid="approval-error">
          {outcome.message}
        </p>
      ) : null}
      {!settled && !answeredElsewhere ? (
        props.approvalId ? (
          <>
            {denying ? (
              <form
                className="approval-deny"
                onSubmit={(event) => {
                  event.preventDefault();
                  void answer("deny");
                }}
              >
                <label htmlFor={reasonId}>Reason for the model (optional)</label>
                <input
                  id={reasonId}
                  value={reason}
                  maxLength={2000}
                  autoFocus
                  data-testid="approval-deny-reason"
                  onChange={(event) => setReason(event.target.value)}
                />
                <div className="approval-actions">
                  <button type="submit" className="danger small" disabled={sending !== null} data-testid="approval-deny-send">
                    {sending === "deny" ? "Denying…" : "Deny the call"}
                  </button>
                  <button type="button" className="ghost small" onClick={() => setDenying(false)} disabled={sending !== null}>
                    Cancel
                  </button>
                </div>
              </form>
            ) : (
              <div className="approval-actions">
                <button type="button" className="primary small" disabled={sending !== null} onClick={() => void answer("approve")} data-testid="approval-approve">
                  {sending === "approve" ? "Approving…" : "Approve"}
                </button>
                <button
                  type="button"
                  className="small"
                  disabled={sending !== null}
                  onClick={() => void answer("approve-session")}
                  data-testid="approval-approve-session"
                  title={`Approve, and let ${props.toolName} run without asking again in this session`}
                >
                  {sending === "approve-session" ? "Approving…" : "Allow for this session"}
                </button>
                <button type="button" className="small" disabled={sending !== null} onClick={() => setDenying(true)} data-testid="approval-deny">
                  Deny
                </button>
                <NotifyMe />
              </div>
            )}
          </>
        ) : (
          <p className="muted">This request carries no approval id, so it cannot be answered here.</p>
        )
      ) : null}
    </section>
  );
}

/** A call a person denied (or whose approval expired): "Denied" and the reason the model was given. */
export function DeniedNote(props: { approvalId: string | undefined; reason: string | undefined }) {
  const sessionId = useContext(ApprovalSession)?.sessionId ?? null;
  const listed = useSessionApprovals(sessionId ?? "");
  const record = listed.data?.find((approval) => approval.id === props.approvalId);
  const reason = props.reason || record?.answerReason || "";
  const expired = record?.state === "expired";
  return (
    <p className="approval-denied" data-testid="approval-denied">
      <strong>{expired ? "Denied (expired)" : "Denied"}</strong>
      {reason ? <span data-testid="approval-denied-reason">: {reason}</span> : <span className="muted"> (no reason given)</span>}
    </p>
  );
}
