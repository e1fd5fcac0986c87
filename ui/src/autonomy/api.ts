// Calls of the autonomy page and the skills editor: /api/autonomy/* and /api/agents/:id/skills.
import { authedFetch } from "../api/auth";
import { ApiError, fieldErrors, reasonOf } from "../api/client";
import type { components } from "../api/schema.gen";

type S = components["schemas"];
export type SignalOut = S["SignalOut"];
export type SignalListOut = S["SignalListOut"];
export type RevisionOut = S["RevisionOut"];
export type RevisionListOut = S["RevisionListOut"];
export type SkillOut = S["SkillOut"];
export type SkillListOut = S["SkillListOut"];
export type SkillCreate = S["SkillCreate"];
export type SkillPatch = S["SkillPatch"];

async function request<Out>(method: string, path: string, body?: unknown): Promise<Out> {
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

const enc = encodeURIComponent;

function query(params: Record<string, string | undefined>): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) if (value) search.set(name, value);
  const text = search.toString();
  return text ? `?${text}` : "";
}

export const autonomyApi = {
  signals: (status?: string, agentId?: string) =>
    request<SignalListOut>("GET", `/api/autonomy/signals${query({ status, agentId })}`),
  ignoreSignal: (id: string) => request<SignalOut>("POST", `/api/autonomy/signals/${enc(id)}/ignore`),
  retrySignal: (id: string) => request<SignalOut>("POST", `/api/autonomy/signals/${enc(id)}/retry`),
  revisions: (agentId?: string) => request<RevisionListOut>("GET", `/api/autonomy/revisions${query({ agentId })}`),
  revert: (id: string) => request<RevisionOut>("POST", `/api/autonomy/revisions/${enc(id)}/revert`),
};

export const skillsApi = {
  list: (agentId: string) => request<SkillListOut>("GET", `/api/agents/${enc(agentId)}/skills`),
  create: (agentId: string, body: SkillCreate) => request<SkillOut>("POST", `/api/agents/${enc(agentId)}/skills`, body),
  update: (agentId: string, skillId: string, body: SkillPatch) =>
    request<SkillOut>("PATCH", `/api/agents/${enc(agentId)}/skills/${enc(skillId)}`, body),
  remove: (agentId: string, skillId: string) =>
    request<void>("DELETE", `/api/agents/${enc(agentId)}/skills/${enc(skillId)}`),
};
