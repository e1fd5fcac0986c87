// The one client of the gateway's /api: openapi-fetch over the generated `paths`, so every call's
// path, parameters, body and answer are checked against the OpenAPI document. Requests go through
// `authedFetch` (the API key, and the prompt on 401). The chat's stream is the exception: the AI
// SDK's transport posts /api/chat itself (chat/Conversation.tsx), with the same `authedFetch`.
import createClient from "openapi-fetch";
import { authedFetch } from "./auth";
import type { paths } from "./schema.gen";
import type * as T from "./types";

/** An error answer of the API: its reason, and per-field messages for validation failures. */
export class ApiError extends Error {
  readonly status: number;
  readonly body: unknown;
  readonly fields: Record<string, string>;

  constructor(status: number, message: string, body: unknown, fields: Record<string, string>) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.body = body;
    this.fields = fields;
  }
}

/** `{"error": ..., "details": [{loc: ["body", "field", ...], msg}]}` -> field name -> message. */
export function fieldErrors(body: unknown): Record<string, string> {
  const fields: Record<string, string> = {};
  const details = (body as T.ErrorOut | null)?.details;
  if (!Array.isArray(details)) return fields;
  for (const detail of details) {
    const loc = Array.isArray(detail.loc) ? (detail.loc as unknown[]) : [];
    const msg = typeof detail.msg === "string" ? detail.msg : "invalid value";
    const field = loc[0] === "body" || loc[0] === "query" || loc[0] === "path" ? loc[1] : loc[0];
    const key = typeof field === "string" ? field : "";
    fields[key] = fields[key] ? `${fields[key]}; ${msg}` : msg;
  }
  return fields;
}

/** The reason in an error answer's body (`{"error": ...}`), or the HTTP status text. */
export function reasonOf(status: number, body: unknown, fallback: string): string {
  if (body && typeof body === "object" && "error" in body && typeof body.error === "string") return body.error;
  if (typeof body === "string" && body.trim()) return body.trim();
  return fallback || `HTTP ${status}`;
}

/** Query parameters as the gateway reads them: unset and empty values are left out. */
function searchOf(params: Record<string, unknown>): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(name, String(value));
  }
  return search.toString();
}

export const http = createClient<paths>({ fetch: authedFetch, querySerializer: searchOf });

/** The query parameters of a GET route. */
export type QueryOf<Path extends keyof paths> = paths[Path] extends { get: { parameters: { query?: infer Query } } }
  ? NonNullable<Query>
  : never;

/** A GET route's query with its enumerations widened to strings, for filters read from the address or a
 * select: they go to the server as they are, and one it does not know comes back as its 422 reason. */
export type FilterOf<Path extends keyof paths> = {
  [Name in keyof QueryOf<Path>]?: NonNullable<QueryOf<Path>[Name]> extends string ? string : QueryOf<Path>[Name];
};

/** What an openapi-fetch call resolves to. */
type Answer<Data> = { data?: Data; error?: unknown; response: Response };

/** The body of a 2xx answer; any other answer throws an `ApiError` carrying the server's reason. */
export async function unwrap<Data>(pending: Promise<Answer<Data>>): Promise<Data> {
  const { data, error, response } = await pending;
  if (response.ok) return data as Data;
  throw new ApiError(response.status, reasonOf(response.status, error, response.statusText), error, fieldErrors(error));
}

/** A call answered with no body (204): resolves when it succeeded. */
export async function done(pending: Promise<Answer<unknown>>): Promise<void> {
  await unwrap(pending);
}

/** A save that lost the optimistic-lock race: the server's copy comes back. */
export type SaveResult = { ok: true; session: T.SessionSummary } | { ok: false; conflict: T.RevisionConflictOut };

const session = (id: string) => ({ params: { path: { session_id: id } } });

export const api = {
  models: () => unwrap(http.GET("/api/models")),
  workspaces: () => unwrap(http.GET("/api/workspaces")),

  sessions: (archived: boolean, workspaceId?: string) =>
    unwrap(http.GET("/api/sessions", { params: { query: { archived, workspaceId } } })),
  createSession: (body: T.SessionCreate) => unwrap(http.POST("/api/sessions", { body })),
  session: (id: string) => unwrap(http.GET("/api/sessions/{session_id}", session(id))),
  sessionMemory: (id: string) => unwrap(http.GET("/api/sessions/{session_id}/memory", session(id))),
  async saveSession(id: string, body: T.SessionSave): Promise<SaveResult> {
    try {
      // openapi-fetch's Writable<> turns the open (any-valued) fields of a stored message part into
      // `undefined`, so the generated SessionSave is passed past that check.
      const saving = http.PUT("/api/sessions/{session_id}", { ...session(id), body: body as never });
      return { ok: true, session: await unwrap(saving) };
    } catch (error) {
      if (error instanceof ApiError && error.status === 409 && isConflict(error.body)) {
        return { ok: false, conflict: error.body };
      }
      throw error;
    }
  },
  patchSession: (id: string, body: T.SessionPatch) =>
    unwrap(http.PATCH("/api/sessions/{session_id}", { ...session(id), body })),
  deleteSession: (id: string) => done(http.DELETE("/api/sessions/{session_id}", session(id))),
  searchMessages: (q: string, limit = 20) => unwrap(http.GET("/api/search/messages", { params: { query: { q, limit } } })),
  /** The session as a download: its file and the name the server gives it. */
  async exportSession(id: string, format: "markdown" | "json"): Promise<{ file: Blob; name: string }> {
    const answer = await http.GET("/api/sessions/{session_id}/export", {
      params: { path: { session_id: id }, query: { format } },
      parseAs: "blob",
    });
    const file = (await unwrap(Promise.resolve(answer as Answer<Blob>))) as Blob;
    const named = /filename="([^"]+)"/.exec(answer.response.headers.get("content-disposition") ?? "");
    return { file, name: named?.[1] ?? `chat.${format === "json" ? "json" : "md"}` };
  },
  hooks: (id: string) => unwrap(http.GET("/api/sessions/{session_id}/hooks", session(id))),
  /** Show another version of an edited user message; the session as it is then. */
  showMessageVersion: (id: string, messageId: string, version: number) =>
    unwrap(
      http.POST("/api/sessions/{session_id}/messages/{message_id}/versions/{version}", {
        params: { path: { session_id: id, message_id: messageId, version } },
      }),
    ),
  cancelTurn: (id: string, turnId: string) =>
    unwrap(
      http.POST("/api/sessions/{session_id}/turns/{turn_id}/cancel", {
        params: { path: { session_id: id, turn_id: turnId } },
      }),
    ),

  agents: () => unwrap(http.GET("/api/agents")),
  patchAgent: (id: string, body: T.AgentPatch) =>
    unwrap(http.PATCH("/api/agents/{agent_id}", { params: { path: { agent_id: id } }, body })),

  agentRuntime: () => unwrap(http.GET("/api/settings/agent-runtime")),
  patchAgentRuntime: (body: T.AgentRuntimeSettingsPatch) => unwrap(http.PATCH("/api/settings/agent-runtime", { body })),
  memorySettings: () => unwrap(http.GET("/api/settings/memory")),
  patchMemorySettings: (body: T.MemorySettingsPatch) => unwrap(http.PATCH("/api/settings/memory", { body })),
  autonomy: () => unwrap(http.GET("/api/settings/autonomy")),
  patchAutonomy: (body: T.AutonomySettingsPatch) => unwrap(http.PATCH("/api/settings/autonomy", { body })),
  browser: () => unwrap(http.GET("/api/settings/browser")),
  patchBrowser: (body: T.BrowserSettingsPatch) => unwrap(http.PATCH("/api/settings/browser", { body })),

  memories: (q?: string) => unwrap(http.GET("/api/memories", { params: { query: { q } } })),
  createMemory: (body: T.MemoryCreate) => unwrap(http.POST("/api/memories", { body })),
  patchMemory: (id: string, body: T.MemoryPatch) =>
    unwrap(http.PATCH("/api/memories/{memory_id}", { params: { path: { memory_id: id } }, body })),
  deleteMemory: (id: string) => done(http.DELETE("/api/memories/{memory_id}", { params: { path: { memory_id: id } } })),

  tasks: (workspaceId?: string) => unwrap(http.GET("/api/tasks", { params: { query: { workspaceId } } })),
  createTask: (body: T.TaskCreate) => unwrap(http.POST("/api/tasks", { body })),
  cancelTask: (id: string) => unwrap(http.POST("/api/tasks/{task_id}/cancel", { params: { path: { task_id: id } } })),
  resolveTask: (id: string, body: T.TaskResolve) =>
    unwrap(http.POST("/api/tasks/{task_id}/resolve", { params: { path: { task_id: id } }, body })),
  deleteTask: (id: string) => done(http.DELETE("/api/tasks/{task_id}", { params: { path: { task_id: id } } })),

  schedules: (workspaceId?: string) => unwrap(http.GET("/api/schedules", { params: { query: { workspaceId } } })),
  createSchedule: (body: T.ScheduleCreate) => unwrap(http.POST("/api/schedules", { body })),
  patchSchedule: (id: string, body: T.SchedulePatch) =>
    unwrap(http.PATCH("/api/schedules/{schedule_id}", { params: { path: { schedule_id: id } }, body })),
  deleteSchedule: (id: string) =>
    done(http.DELETE("/api/schedules/{schedule_id}", { params: { path: { schedule_id: id } } })),

  feedback: (body: T.FeedbackCreate) => unwrap(http.POST("/api/observability/feedback", { body })),
};

function isConflict(body: unknown): body is T.RevisionConflictOut {
  return !!body && typeof body === "object" && "session" in body && (body as { error?: unknown }).error === "revision conflict";
}
