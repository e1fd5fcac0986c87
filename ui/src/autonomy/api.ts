// Calls of the autonomy page and the skills editor: /api/autonomy/* and /api/agents/:id/skills.
import { done, http, unwrap, type FilterOf, type QueryOf } from "../api/client";
import type { SkillCreate, SkillPatch } from "../api/types";

const signal = (id: string) => ({ params: { path: { signal_id: id } } });
const skills = (agentId: string) => ({ params: { path: { agent_id: agentId } } });
const skill = (agentId: string, skillId: string) => ({ params: { path: { agent_id: agentId, skill_id: skillId } } });

export const autonomyApi = {
  signals: (query: FilterOf<"/api/autonomy/signals">) =>
    unwrap(http.GET("/api/autonomy/signals", { params: { query: query as QueryOf<"/api/autonomy/signals"> } })),
  ignoreSignal: (id: string) => unwrap(http.POST("/api/autonomy/signals/{signal_id}/ignore", signal(id))),
  retrySignal: (id: string) => unwrap(http.POST("/api/autonomy/signals/{signal_id}/retry", signal(id))),
  revisions: (agentId?: string) => unwrap(http.GET("/api/autonomy/revisions", { params: { query: { agentId } } })),
  revert: (id: string) =>
    unwrap(http.POST("/api/autonomy/revisions/{revision_id}/revert", { params: { path: { revision_id: id } } })),
  selfUpdate: () => unwrap(http.GET("/api/self-update", {})),
  selfUpdateDiff: (id: string) =>
    unwrap(http.GET("/api/self-update/attempts/{attempt_id}/diff", { params: { path: { attempt_id: id } } })),
  deleteSelfUpdateRef: (id: string) =>
    done(http.DELETE("/api/self-update/attempts/{attempt_id}/ref", { params: { path: { attempt_id: id } } })),
};

export const skillsApi = {
  list: (agentId: string) => unwrap(http.GET("/api/agents/{agent_id}/skills", skills(agentId))),
  create: (agentId: string, body: SkillCreate) =>
    unwrap(http.POST("/api/agents/{agent_id}/skills", { ...skills(agentId), body })),
  update: (agentId: string, skillId: string, body: SkillPatch) =>
    unwrap(http.PATCH("/api/agents/{agent_id}/skills/{skill_id}", { ...skill(agentId, skillId), body })),
  remove: (agentId: string, skillId: string) =>
    done(http.DELETE("/api/agents/{agent_id}/skills/{skill_id}", skill(agentId, skillId))),
};
