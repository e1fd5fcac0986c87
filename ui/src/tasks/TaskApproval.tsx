// A running task whose turn waits for a person to answer a tool call's approval (docs/approvals.md):
// what it waits for, and the chat's own approval card (Approve / Allow for this session / Deny, sent to
// POST /api/approvals/{id}) over the task's thread, whose approvals the card reads.
import { useMemo } from "react";
import type { TaskOut } from "../api/types";
import { ApprovalCard, ApprovalSession, type ApprovalChat } from "../approvals/ApprovalCard";
import { stamp } from "../common/stamp";

export function TaskApproval(props: { task: TaskOut; onAnswered: () => void }) {
  const { task, onAnswered } = props;
  const wait = task.waitingForApproval;
  // The card tells its chat once the approval is answered; here that reloads the task.
  const chat = useMemo<ApprovalChat>(() => ({ sessionId: task.threadId, respond: () => onAnswered() }), [task.threadId, onAnswered]);
  if (!wait) return null;
  return (
    <div className="task-approval" data-testid="task-approval" data-approval-id={wait.approvalId}>
      <p className="small-text" data-testid="task-waiting">
        <span className="badge warn">waiting for approval: {wait.toolName}</span>{" "}
        <span className="muted">since {stamp(wait.since)}; the attempt timeout does not run while it waits</span>
      </p>
      <ApprovalSession.Provider value={chat}>
        <ApprovalCard key={wait.approvalId} toolName={wait.toolName} approvalId={wait.approvalId} input={undefined} />
      </ApprovalSession.Provider>
    </div>
  );
}
