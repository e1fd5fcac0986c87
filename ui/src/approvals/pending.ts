// The approvals waiting for a person, shared by the sessions sidebar (a badge per session) and the
// chat (an approval card reads its own record): one react-query cache under ["approvals", ...].
// The pending list is polled every few seconds while the page is visible (react-query pauses the
// interval in a hidden tab) and refreshed at once when a chat sees a new approval request.
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { useCallback } from "react";
import { approvalsApi, type Approval } from "./api";

export const PENDING_POLL_MS = 4_000;
const PENDING_KEY = ["approvals", "pending"] as const;
export const sessionApprovalsKey = (sessionId: string) => ["approvals", "session", sessionId] as const;

/** Pending approvals by session id (an empty map while nothing is loaded or the route is missing). */
export function usePendingApprovals(): Map<string, Approval[]> {
  const query = useQuery({
    queryKey: PENDING_KEY,
    queryFn: () => approvalsApi.list({ state: "pending" }),
    refetchInterval: PENDING_POLL_MS,
    refetchIntervalInBackground: false,
    staleTime: 0,
  });
  const bySession = new Map<string, Approval[]>();
  for (const approval of query.data ?? []) {
    const list = bySession.get(approval.sessionId) ?? [];
    list.push(approval);
    bySession.set(approval.sessionId, list);
  }
  return bySession;
}

/** A session's approvals (every state), for the cards of its chat. */
export function useSessionApprovals(sessionId: string) {
  return useQuery({
    queryKey: sessionApprovalsKey(sessionId),
    queryFn: () => approvalsApi.list({ sessionId }),
    enabled: !!sessionId,
    staleTime: 0,
  });
}

/** Reload every approval list (the sidebar's pending list and the sessions' lists). */
export function useRefreshApprovals(): () => void {
  const client = useQueryClient();
  return useCallback(() => {
    void client.invalidateQueries({ queryKey: ["approvals"] });
  }, [client]);
}
