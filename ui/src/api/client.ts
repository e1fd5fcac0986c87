// Typed calls to the gateway's /api. Request and response shapes are the generated DTOs.
import { authedFetch } from "./auth";
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

type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE";

async function call<Out>(method: Method, path: string, body?: unknown, okStatuses: number[] = []): Promise<Out> {
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
  if (response.ok || okStatuses.includes(response.status)) return parsed as Out;
  throw new ApiError(response.status, reasonOf(response.status, parsed, response.statusText), parsed, fieldErrors(parsed));
}

const enc = encodeURIComponent;

function query(params: Record<string, string | number | boolean | undefined>): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== "") search.set(name, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

/** A save that lost the optimistic-lock race: the server's copy comes back. */
export type SaveResult = { ok: true; session: T.SessionSummary } | { ok: false; conflict: T.RevisionConflictOut };

export const api = {
  models: () => call<T.ModelsOut>("GET", "/api/models"),
  workspaces: () => call<T.WorkspaceListOut>("GET", "/api/workspaces"),

  sessions: (archived: boolean, workspaceId?: string) =>
    call<T.SessionListOut>("GET", `/api/sessions${query({ archived, workspaceId })}`),
  createSession: (body: T.SessionCreate) => call<T.SessionSummary>("POST", "/api/sessions", body),
  session: (id: string) => call<T.SessionOut>("GET", `/api/sessions/${enc(id)}`),
  async saveSession(id: string, body: T.SessionSave): Promise<SaveResult> {
    try {
      return { ok: true, session: await call<T.SessionSummary>("PUT", `/api/sessions/${enc(id)}`, body) };
    } catch (error) {
      if (error instanceof ApiError && error.status === 409 && isConflict(error.body)) {
        return { ok: false, conflict: error.body };
      }
      throw error;
    }
  },
  patchSession: (id: string, body: T.SessionPatch) => call<T.SessionSummary>("PATCH", `/api/sessions/${enc(id)}`, body),
  deleteSession: (id: string) => call<void>("DELETE", `/api/sessions/${enc(id)}`),
  hooks: (id: string) => call<T.HookRunListOut>("GET", `/api/sessions/${enc(id)}/hooks`),

  agents: () => call<T.AgentListOut>("GET", "/api/agents"),
  patchAgent: (id: string, body: T.AgentPatch) => call<T.AgentOut>("PATCH", `/api/agents/${enc(id)}`, body),

  agentRuntime: () => call<T.AgentRuntimeSettingsOut>("GET", "/api/settings/agent-runtime"),
  patchAgentRuntime: (body: T.AgentRuntimeSettingsPatch) =>
    call<T.AgentRuntimeSettingsOut>("PATCH", "/api/settings/agent-runtime", body),
  memorySettings: () => call<T.MemorySettingsOut>("GET", "/api/settings/memory"),
  patchMemorySettings: (body: T.MemorySettingsPatch) => call<T.MemorySettingsOut>("PATCH", "/api/settings/memory", body),
  autonomy: () => call<T.AutonomySettingsOut>("GET", "/api/settings/autonomy"),
  patchAutonomy: (body: T.AutonomySettingsPatch) =>
    call<T.AutonomySettingsOut>("PATCH", "/api/settings/autonomy", body),
  browser: () => call<T.BrowserSettingsOut>("GET", "/api/settings/browser"),
  patchBrowser: (body: T.BrowserSettingsPatch) => call<T.BrowserSettingsOut>("PATCH", "/api/settings/browser", body),

  memories: (q?: string) => call<T.MemoryListOut>("GET", `/api/memories${query({ q })}`),
  createMemory: (body: T.MemoryCreate) => call<T.MemoryOut>("POST", "/api/memories", body),
  patchMemory: (id: string, body: T.MemoryPatch) => call<T.MemoryOut>("PATCH", `/api/memories/${enc(id)}`, body),
  deleteMemory: (id: string) => call<void>("DELETE", `/api/memories/${enc(id)}`),

  tasks: (workspaceId?: string) => call<T.TaskListOut>("GET", `/api/tasks${query({ workspaceId })}`),
  createTask: (body: T.TaskCreate) => call<T.TaskOut>("POST", "/api/tasks", body),
  cancelTask: (id: string) => call<T.TaskOut>("POST", `/api/tasks/${enc(id)}/cancel`),
  resolveTask: (id: string, body: T.TaskResolve) => call<T.TaskOut>("POST", `/api/tasks/${enc(id)}/resolve`, body),
  deleteTask: (id: string) => call<void>("DELETE", `/api/tasks/${enc(id)}`),

  schedules: (workspaceId?: string) => call<T.ScheduleListOut>("GET", `/api/schedules${query({ workspaceId })}`),
  createSchedule: (body: T.ScheduleCreate) => call<T.ScheduleOut>("POST", "/api/schedules", body),
  patchSchedule: (id: string, body: T.SchedulePatch) =>
    call<T.ScheduleOut>("PATCH", `/api/schedules/${enc(id)}`, body),
  feedback: (body: T.FeedbackCreate) => call<T.FeedbackOut>("POST", "/api/observability/feedback", body),

  deleteSchedule: (id: string) => call<void>("DELETE", `/api/schedules/${enc(id)}`),
};

function isConflict(body: unknown): body is T.RevisionConflictOut {
  return !!body && typeof body === "object" && "session" in body && (body as { error?: unknown }).error === "revision conflict";
}
