// The documents routes (/api/workspaces/:id/documents...), typed from the generated OpenAPI schema.
import { authedFetch } from "../api/auth";
import { ApiError, fieldErrors, reasonOf } from "../api/client";
import type { components } from "../api/schema.gen";

type S = components["schemas"];
export type IndexStatusOut = S["IndexStatusOut"];
export type DocumentListOut = S["DocumentListOut"];
export type DocumentSearchOut = S["DocumentSearchOut"];
export type DocumentSearch = S["DocumentSearch"];

async function call<Out>(method: "GET" | "POST", path: string, body?: unknown): Promise<Out> {
  const init: RequestInit = { method };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers = { "content-type": "application/json" };
  }
  const response = await authedFetch(path, init);
  const text = await response.text();
  let parsed: unknown = undefined;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
  }
  if (response.ok) return parsed as Out;
  throw new ApiError(response.status, reasonOf(response.status, parsed, response.statusText), parsed, fieldErrors(parsed));
}

const base = (workspaceId: string) => `/api/workspaces/${encodeURIComponent(workspaceId)}/documents`;

export const documentsApi = {
  status: (workspaceId: string) => call<IndexStatusOut>("GET", `${base(workspaceId)}/index`),
  reindex: (workspaceId: string) => call<IndexStatusOut>("POST", `${base(workspaceId)}/index`),
  list: (workspaceId: string) => call<DocumentListOut>("GET", base(workspaceId)),
  search: (workspaceId: string, body: DocumentSearch) =>
    call<DocumentSearchOut>("POST", `${base(workspaceId)}/search`, body),
};
