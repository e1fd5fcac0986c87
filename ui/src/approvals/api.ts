// Calls of the tool-approval routes (docs/approvals.md): /api/approvals, a session's grants, and the
// shapes of an agent's `toolApproval` rules. Written by hand, not through the generated client, so the
// UI builds whether or not the gateway's OpenAPI document has these routes yet; the shapes follow
// the contract in docs/approvals.md. Errors are `ApiError`s with the server's reason, as the typed
// client's are.
import { authedFetch } from "../api/auth";
import { ApiError, fieldErrors, reasonOf } from "../api/client";

export type ApprovalState = "pending" | "approved" | "denied" | "expired";
export type ApprovalDecision = "approve" | "approve-session" | "deny";

export type Approval = {
  id: string;
  sessionId: string;
  turnId: string;
  toolCallId: string;
  agentId: string;
  toolName: string;
  arguments: Record<string, unknown>;
  reason: string;
  /** "policy" or "hook:<handler id>" */
  askedBy: string;
  state: ApprovalState;
  scope: "once" | "session" | null;
  answeredBy: string | null;
  answerReason: string | null;
  createdAt: string;
  answeredAt: string | null;
  expiresAt: string;
};

export type ApprovalGrant = { sessionId: string; toolName: string; grantedBy: string; createdAt: string; approvalId: string };

export const APPROVAL_GROUPS = ["workspace-write", "shell", "browser", "secrets", "delegation"] as const;
export type ApprovalGroup = (typeof APPROVAL_GROUPS)[number];
export const RULE_DECISIONS = ["allow", "ask", "deny"] as const;
export type RuleDecision = (typeof RULE_DECISIONS)[number];

/** One rule of an agent's policy: a tool or a group, a decision, and the arguments that exempt a call. */
export type ApprovalRule = {
  tool?: string | null;
  group?: ApprovalGroup | string | null;
  decision: RuleDecision;
  unless?: Record<string, string>;
};

async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const response = await authedFetch(path, {
    method,
    headers: body === undefined ? undefined : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    // not JSON: kept as text for the reason
  }
  if (!response.ok) {
    throw new ApiError(response.status, reasonOf(response.status, parsed, response.statusText), parsed, fieldErrors(parsed));
  }
  return parsed as T;
}

function query(params: Record<string, string | undefined>): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) if (value) search.set(name, value);
  const text = search.toString();
  return text ? `?${text}` : "";
}

export const approvalsApi = {
  list: (filter: { state?: ApprovalState; sessionId?: string } = {}) =>
    call<{ approvals: Approval[] }>("GET", `/api/approvals${query(filter)}`).then((answer) => answer.approvals),
  answer: (id: string, decision: ApprovalDecision, reason = "") =>
    call<Approval>("POST", `/api/approvals/${encodeURIComponent(id)}`, reason ? { decision, reason } : { decision }),
  grants: (sessionId: string) =>
    call<{ grants: ApprovalGrant[] }>("GET", `/api/sessions/${encodeURIComponent(sessionId)}/approval-grants`).then(
      (answer) => answer.grants,
    ),
  revokeGrant: (sessionId: string, toolName: string) =>
    call<void>("DELETE", `/api/sessions/${encodeURIComponent(sessionId)}/approval-grants/${encodeURIComponent(toolName)}`),
};
