// Names for the gateway's wire DTOs. Every shape comes from the generated OpenAPI types
// (schema.gen.d.ts, made from `python -m popagent_gateway.openapi`); none is declared here.
import type { components } from "./schema.gen";

type S = components["schemas"];

export type ErrorOut = S["ErrorOut"];
export type ModelsOut = S["ModelsOut"];
export type UnlistedModelOut = S["UnlistedModelOut"];
export type SessionSummary = S["SessionSummary"];
export type SessionOut = S["SessionOut"];
export type SessionListOut = S["SessionListOut"];
export type SessionCreate = S["SessionCreate"];
export type SessionSave = S["SessionSave"];
export type SessionPatch = S["SessionPatch"];
export type RevisionConflictOut = S["RevisionConflictOut"];
export type StoredMessage = S["UIMessage"];
export type ChatTurnCreate = S["ChatTurnCreate"];
export type HookRunOut = S["HookRunOut"];
export type HookRunListOut = S["HookRunListOut"];
export type WorkspaceOut = S["WorkspaceOut"];
export type WorkspaceListOut = S["WorkspaceListOut"];
export type AgentOut = S["AgentOut"];
export type AgentListOut = S["AgentListOut"];
export type AgentPatch = S["AgentPatch"];
export type AgentRuntimeSettingsOut = S["AgentRuntimeSettingsOut"];
export type AgentRuntimeSettingsPatch = S["AgentRuntimeSettingsPatch"];
export type MemorySettingsOut = S["MemorySettingsOut"];
export type MemorySettingsPatch = S["MemorySettingsPatch"];
export type AutonomySettingsOut = S["AutonomySettingsOut"];
export type AutonomySettingsPatch = S["AutonomySettingsPatch"];
export type BrowserSettingsOut = S["BrowserSettingsOut"];
export type BrowserSettingsPatch = S["BrowserSettingsPatch"];
export type TaskOut = S["TaskOut"];
export type TaskListOut = S["TaskListOut"];
export type TaskCreate = S["TaskCreate"];
export type TaskResolve = S["TaskResolve"];
export type ScheduleOut = S["ScheduleOut"];
export type ScheduleListOut = S["ScheduleListOut"];
export type ScheduleCreate = S["ScheduleCreate"];
export type SchedulePatch = S["SchedulePatch"];
export type MemoryOut = S["MemoryOut"];
export type MemoryListOut = S["MemoryListOut"];
export type MemoryCreate = S["MemoryCreate"];
export type MemoryPatch = S["MemoryPatch"];
export type FeedbackCreate = S["FeedbackCreate"];
export type FeedbackOut = S["FeedbackOut"];
