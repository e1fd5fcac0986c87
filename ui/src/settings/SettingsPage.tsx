import { useQueryClient } from "@tanstack/react-query";
import type { ReactNode } from "react";
import { api } from "../api/client";
import type {
  AgentOut,
  AgentPatch,
  AgentRuntimeSettingsPatch,
  AutonomySettingsPatch,
  BrowserSettingsPatch,
  MemorySettingsPatch,
  ModelsOut,
  UnlistedModelOut,
} from "../api/types";
import { RulesEditor } from "../approvals/RulesEditor";
import { BrowserHealthCard } from "../browser/BrowserHealthCard";
import { FORM_FIELDS, PatchForm, SelectInput, type FieldInputProps, type PatchFormProps } from "../common/forms";
import { useLoad } from "../common/useLoad";
import { href } from "../route";
import { Memories } from "../memory/Memories";
import { ThisBrowser } from "./ThisBrowser";

const RUNTIME_GROUPS = [
  { title: "Model", fields: ["defaultModel"] },
  { title: "Steps and tools", fields: ["supervisorMaxSteps", "specialistMaxSteps", "maxConcurrentToolCalls", "maxProcessorRetries", "commandTimeoutMs"] },
  { title: "Delegation", fields: ["delegationContextMaxChars", "delegationResultMaxChars", "delegationFailureText", "delegationTruncationText", "finalResponseFeedback"] },
  {
    title: "Background tasks",
    fields: ["taskConcurrency", "taskAttemptTimeoutMs", "taskRetryBaseMs", "taskRetryCapMs", "taskPollIntervalMs", "taskHeartbeatIntervalMs", "taskHeartbeatTimeoutMs", "taskAbortAckTimeoutMs"],
  },
];
const MEMORY_GROUPS = [
  { title: "Observational memory", fields: ["enabled", "retrievalScope", "rawHistoryRetentionMessages", "idleActivationSeconds", "activateOnProviderChange", "sharedBudget", "temporalMarkers", "forwardAttachments"] },
  { title: "Observation", fields: ["observationMessageTokens", "observationBufferActivation", "observationBlockAfter", "asyncObservationEnabled", "previousObservationMaxTokens", "observerInstructions"] },
  { title: "Reflection", fields: ["reflectionObservationTokens", "reflectionBufferActivation", "reflectionBlockAfter", "asyncReflectionEnabled", "reflectorInstructions"] },
];

// `modelsChanged`: a save that can change what GET /api/models reports (the default, an override).
type Section = {
  id: string;
  label: string;
  form: string;
  render: (models: ModelsOut | undefined, modelsChanged: () => void) => ReactNode;
};

/** A model select filled from /api/models; `inherit` adds an empty choice meaning "no override". */
export function modelSelect(models: ModelsOut | undefined, inherit?: string) {
  return function ModelSelect(input: FieldInputProps) {
    const current = typeof input.value === "string" ? input.value : "";
    const catalog = models?.models ?? [];
    const options = current && !catalog.includes(current) ? [current, ...catalog] : catalog;
    const contextOf = (model: string) => models?.contextWindows[model];
    const choices = options.map((model): [string, string] => [model, contextOf(model) ? `${model} (${Math.round((contextOf(model) ?? 0) / 1000)}K)` : model]);
    return <SelectInput input={input} value={current} options={inherit !== undefined ? [["", inherit], ...choices] : choices} />;
  };
}

function Loading<T>({ name, load, children }: { name: string; load: () => Promise<T>; children: (value: T) => ReactNode }) {
  // Fresh each time a section opens: the form starts from the server's current values.
  const loaded = useLoad(["settings", name], load, { fresh: true });
  if (loaded.error) return <p role="alert" className="error-text">Could not load: {loaded.error.message}</p>;
  if (!loaded.data) return <p className="muted">Loading…</p>;
  return <>{children(loaded.data)}</>;
}

/** One settings object: loaded as `name`, then its PATCH form (below `intro`, when given). */
function SettingsForm<Out extends object>({ name, load, intro, ...form }: Omit<PatchFormProps<Out>, "value"> & { name: string; load: () => Promise<Out>; intro?: ReactNode }) {
  return (
    <Loading name={name} load={load}>
      {(value) =>
        intro ? (
          <div className="stack">
            {intro}
            <PatchForm {...form} value={value} />
          </div>
        ) : (
          <PatchForm {...form} value={value} />
        )
      }
    </Loading>
  );
}

function toolsInput(known: string[]) {
  return function Tools(input: FieldInputProps) {
    const selected = Array.isArray(input.value) ? (input.value as string[]) : [];
    const all = [...new Set([...known, ...selected])];
    return (
      <div id={input.id} role="group" aria-describedby={input.describedBy} className="checkbox-group">
        {all.map((tool) => (
          <label key={tool} className="checkbox-option">
            <input
              type="checkbox"
              checked={selected.includes(tool)}
              onChange={(event) =>
                input.onChange(event.target.checked ? [...selected, tool] : selected.filter((name) => name !== tool))
              }
            />
            <code>{tool}</code>
          </label>
        ))}
      </div>
    );
  };
}

/** An agent's model override; marked when the model gateway does not list it (chats are then refused). */
function OverrideBadge({ agent, unlisted }: { agent: AgentOut; unlisted: UnlistedModelOut[] }) {
  if (!agent.model) return null;
  const problem = unlisted.find((entry) => entry.agentId === agent.id);
  if (!problem) return <span className="badge pending">{agent.model}</span>;
  return (
    <span className="badge bad" title={problem.message} data-testid="unlisted-override">
      {agent.model} · not offered by the model gateway
    </span>
  );
}

const AGENT_ORDER = ["displayName", "description", "instructions", "model", "workspaceAccess", "browserAccess", "delegationEligible", "tools", "toolApproval", "sourceUrl"];
// Offered even when the generated OpenAPI fields predate the approval policy (docs/approvals.md).
const AGENT_EXTRA_FIELDS = { toolApproval: { type: "array", description: "the complete new tool approval policy" } };

function Agents({ models, modelsChanged }: { models: ModelsOut | undefined; modelsChanged: () => void }) {
  // A saved override changes what the badges say: the list (and its unlisted models) is read again,
  // each open form keeping its own copy.
  const queries = useQueryClient();
  const saved = () => {
    modelsChanged();
    void queries.invalidateQueries({ queryKey: ["settings", "agents"] });
  };
  return (
    <Loading name="agents" load={api.agents}>
      {(list) => (
        <div className="stack">
          <p className="muted">
            The supervisor and its specialists. Edits apply on the next run. Delegation eligibility and the description decide whom the
            supervisor delegates to. Tools lists the registered tools. Workspace access decides the repository tools: read-write gets files and the sandboxed
            shell, read-only gets read, list, grep and stat, none gets no workspace tool. Browser access decides bifrostNavigator: read-only may navigate and read pages, interactive may also click, type and fill secrets with useBrowserSecret.
          </p>
          {list.agents.map((agent: AgentOut) => (
            <details key={agent.id} className="card" data-agent-id={agent.id}>
              <summary>
                <strong>{agent.displayName}</strong> <span className="muted">({agent.id})</span>
                <OverrideBadge agent={agent} unlisted={list.unlistedModels} />
              </summary>
              <PatchForm
                form="AgentPatch"
                title={`${agent.displayName} profile`}
                value={agent}
                onSave={(patch) => api.patchAgent(agent.id, patch as AgentPatch)}
                onSaved={saved}
                labels={{ model: "Model override", sourceUrl: "Source URL", toolApproval: "Tool approval rules" }}
                order={AGENT_ORDER}
                extraFields={AGENT_EXTRA_FIELDS}
                custom={{
                  tools: toolsInput(list.knownTools),
                  model: modelSelect(models, "inherit the chat's model"),
                  toolApproval: (input) => <RulesEditor input={input} knownTools={list.knownTools} />,
                }}
              />
            </details>
          ))}
        </div>
      )}
    </Loading>
  );
}

const SECTIONS: Section[] = [
  { id: "agents", label: "Agents", form: "AgentPatch", render: (models, modelsChanged) => <Agents models={models} modelsChanged={modelsChanged} /> },
  {
    id: "agent-runtime",
    label: "Agent runtime",
    form: "AgentRuntimeSettingsPatch",
    render: (models, modelsChanged) => (
      <SettingsForm
        name="agentRuntime"
        load={api.agentRuntime}
        form="AgentRuntimeSettingsPatch"
        title="Agent runtime"
        description="Default model, step ceilings, tool-call and retry limits, delegation bounds and background-task timing. Applies on the next turn."
        onSave={(patch) => api.patchAgentRuntime(patch as AgentRuntimeSettingsPatch)}
        onSaved={modelsChanged}
        groups={RUNTIME_GROUPS}
        labels={{ defaultModel: "Default model", maxProcessorRetries: "Output retries", finalResponseFeedback: "Final answer reminder" }}
        custom={{ defaultModel: modelSelect(models) }}
      />
    ),
  },
  {
    id: "memory",
    label: "Memory compaction",
    form: "MemorySettingsPatch",
    render: () => (
      <SettingsForm
        name="memorySettings"
        load={api.memorySettings}
        form="MemorySettingsPatch"
        title="Observational memory"
        description="Observational memory: long conversations are sent as dated observations of the older messages plus the newest messages; the originals stay stored. Changes apply on the next turn."
        onSave={(patch) => api.patchMemorySettings(patch as MemorySettingsPatch)}
        groups={MEMORY_GROUPS}
        labels={{ enabled: "Enable observational memory" }}
      />
    ),
  },
  { id: "memories", label: "Long-term memories", form: "MemoryCreate", render: () => <Memories /> },
  {
    id: "autonomy",
    label: "Autonomy",
    form: "AutonomySettingsPatch",
    render: () => (
      <SettingsForm
        name="autonomy"
        load={api.autonomy}
        form="AutonomySettingsPatch"
        title="Autonomy"
        description="With evolution on, failed turns become signals that reflection turns into learned overlays (and, with skill creation on, learned skills), from the next run; see the Autonomy page. With self-update on too, the agents work on each eligible repository on that cron in a local clone without remotes, and only a reviewed, verified commit is imported as a local ref for you to merge; see the Autonomy page."
        onSave={(patch) => api.patchAutonomy(patch as AutonomySettingsPatch)}
        order={["evolutionEnabled", "skillCreationEnabled", "selfUpdateEnabled", "selfUpdateCron"]}
      />
    ),
  },
  {
    id: "browser",
    label: "Browser",
    form: "BrowserSettingsPatch",
    render: () => (
      <SettingsForm
        name="browser"
        load={api.browser}
        intro={<BrowserHealthCard />}
        form="BrowserSettingsPatch"
        title="Browser"
        description="Whether agents with browser access get bifrostNavigator and useBrowserSecret. A change applies at once: calls in flight are refused."
        onSave={(patch) => api.patchBrowser(patch as BrowserSettingsPatch)}
        labels={{ enabled: "Enable the browser", allowCodeExecution: "Allow code execution (browser_run_code_unsafe)" }}
      />
    ),
  },
  { id: "this-browser", label: "This browser", form: "", render: (_models, modelsChanged) => <ThisBrowser onModelsChanged={modelsChanged} /> },
];

export function SettingsPage(props: { section: string | null; models: ModelsOut | undefined; onModelsChanged: () => void }) {
  // A section whose body the gateway does not describe is not offered.
  const sections = SECTIONS.filter((section) => !section.form || FORM_FIELDS[section.form]);
  const current = sections.find((section) => section.id === props.section) ?? sections[0];
  return (
    <div className="page settings-page">
      <h1>Settings</h1>
      <nav className="tabs" aria-label="Settings sections">
        {sections.map((section) => (
          <a
            key={section.id}
            href={href({ page: "settings", section: section.id })}
            aria-current={section === current ? "page" : undefined}
          >
            {section.label}
          </a>
        ))}
      </nav>
      <section className="settings-section" aria-label={current?.label}>
        {current ? <div key={current.id}>{current.render(props.models, props.onModelsChanged)}</div> : null}
      </section>
    </div>
  );
}
