// The documents routes (/api/workspaces/:id/documents...).
import { http, unwrap } from "../api/client";
import type { DocumentSearch } from "../api/types";

const workspace = (workspaceId: string) => ({ params: { path: { workspace_id: workspaceId } } });

export const documentsApi = {
  status: (workspaceId: string) => unwrap(http.GET("/api/workspaces/{workspace_id}/documents/index", workspace(workspaceId))),
  reindex: (workspaceId: string) =>
    unwrap(http.POST("/api/workspaces/{workspace_id}/documents/index", workspace(workspaceId))),
  list: (workspaceId: string) => unwrap(http.GET("/api/workspaces/{workspace_id}/documents", workspace(workspaceId))),
  search: (workspaceId: string, body: DocumentSearch) =>
    unwrap(http.POST("/api/workspaces/{workspace_id}/documents/search", { ...workspace(workspaceId), body })),
};
