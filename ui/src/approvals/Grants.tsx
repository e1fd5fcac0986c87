// A session's approval grants ("Allow for this session" answers): each tool that no longer asks in
// this chat, with Revoke (its next call asks again). In the chat's toolbar beside the other
// session settings; loaded when opened, and again whenever the approvals are refreshed.
import { useQuery } from "@tanstack/react-query";
import { useState } from "react";
import { ApiError } from "../api/client";
import { messageOf } from "../common/useLoad";
import { approvalsApi } from "./api";
import { useRefreshApprovals } from "./pending";

export function SessionGrants({ sessionId }: { sessionId: string }) {
  const [open, setOpen] = useState(false);
  const grants = useQuery({
    queryKey: ["approvals", "grants", sessionId],
    queryFn: () => approvalsApi.grants(sessionId),
    enabled: open,
    staleTime: 0,
  });
  const refresh = useRefreshApprovals();
  const [revoking, setRevoking] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const revoke = async (toolName: string) => {
    setRevoking(toolName);
    setError(null);
    try {
      await approvalsApi.revokeGrant(sessionId, toolName);
    } catch (caught) {
      // 404: revoked meanwhile (another tab); the reloaded list shows it.
      if (!(caught instanceof ApiError && caught.status === 404)) setError(`Not revoked: ${messageOf(caught)}`);
    } finally {
      setRevoking(null);
      refresh();
      await grants.refetch();
    }
  };
  const list = grants.data ?? [];
  return (
    <details className="session-grants" data-testid="session-grants" onToggle={(event) => setOpen(event.currentTarget.open)}>
      <summary>Allowed tools</summary>
      <div className="session-grants-body">
        <p className="muted small-text">Tools approved with “Allow for this session” run here without asking.</p>
        {grants.error ? <p className="error-text small-text">Could not load: {grants.error.message}</p> : null}
        {grants.isFetching && !grants.data ? <p className="muted small-text">Loading…</p> : null}
        {grants.data && !list.length ? <p className="muted small-text" data-testid="no-grants">No tool is allowed for this session.</p> : null}
        {list.length ? (
          <ul className="grant-list">
            {list.map((grant) => (
              <li key={grant.toolName} data-testid="grant" data-tool={grant.toolName}>
                <code>{grant.toolName}</code>
                <span className="muted small-text"> since {new Date(grant.createdAt).toLocaleString()}</span>
                <button
                  type="button"
                  className="ghost small"
                  disabled={revoking !== null}
                  aria-label={`Revoke ${grant.toolName}`}
                  onClick={() => void revoke(grant.toolName)}
                >
                  {revoking === grant.toolName ? "Revoking…" : "Revoke"}
                </button>
              </li>
            ))}
          </ul>
        ) : null}
        {error ? (
          <p className="error-text small-text" role="alert">
            {error}
          </p>
        ) : null}
      </div>
    </details>
  );
}
