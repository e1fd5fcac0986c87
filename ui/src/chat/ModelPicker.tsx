import { useId, useState } from "react";
import type { ModelsOut } from "../api/types";
import { ErrorText } from "../common/ErrorText";
import { href } from "../route";
import { chatModels, isChatModel } from "./models";

export function formatTokens(tokens: number): string {
  if (tokens >= 1_000_000) return `${+(tokens / 1_000_000).toFixed(2)}M`;
  if (tokens >= 1_000) return `${+(tokens / 1_000).toFixed(1)}K`;
  return String(tokens);
}

/** Models and context windows come from GET /api/models; the caller preselects `initialModel`. */
export function ModelPicker(props: { models: ModelsOut | undefined; value: string; onChange: (model: string) => void; disabled?: boolean }) {
  const id = useId();
  const catalog = chatModels(props.models);
  // The persisted default (or a model a session used) may be missing from a stale catalog: keep it selectable.
  const options = props.value && !catalog.includes(props.value) ? [props.value, ...catalog] : catalog;
  const window = props.value ? props.models?.contextWindows[props.value] : undefined;
  return (
    <div className="model-picker">
      <label htmlFor={id} className="visually-hidden">
        Model
      </label>
      <select
        id={id}
        value={props.value}
        onChange={(event) => props.onChange(event.target.value)}
        disabled={props.disabled || !options.length}
        data-testid="model-picker"
      >
        {options.length ? null : <option value="">no models</option>}
        {options.map((model) => (
          <option key={model} value={model}>
            {model}
            {model === props.models?.defaultModel ? " (default)" : ""}
          </option>
        ))}
      </select>
      <span className="context-window muted" data-testid="context-window">
        {window ? `${formatTokens(window)} context` : "context size unknown"}
      </span>
      {props.models?.warning ? (
        <span className="muted warn-text" title={props.models.warning}>
          catalog: {props.models.warning}
        </span>
      ) : null}
    </div>
  );
}

/** The model a tab starts on: the persisted default when the catalog lists it, else the first listed model. */
export function initialModel(models: ModelsOut): string {
  if (models.defaultModelListed && isChatModel(models.defaultModel)) return models.defaultModel;
  return chatModels(models)[0] ?? models.defaultModel;
}

/** What one click on the model notice changes: the default (null: left as it is) and the agents set to inherit. */
export type ModelFix = { defaultModel: string | null; inheritAgents: string[] };

function joined(items: string[]): string {
  if (items.length < 2) return items.join("");
  return `${items.slice(0, -1).join(", ")} and ${items[items.length - 1]}`;
}

/**
 * What the configuration names that the model gateway does not list (GET /api/models `unlistedModels`),
 * fixed in one click: the picked model becomes the default when the default is unlisted, and every
 * agent whose override is unlisted inherits the chat's model. A chat is refused while an agent it
 * may run is on an unlisted override; on the seeded configuration only the default is unlisted, and a
 * chat on the picked model runs, so the first message needs only the pick.
 */
export function ModelNotice(props: { models: ModelsOut | undefined; value: string; onFix: (fix: ModelFix) => Promise<void> }) {
  const [saving, setSaving] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const models = props.models;
  if (!models) return null;
  const overrides = models.unlistedModels.filter((entry) => entry.agentId);
  const agents = overrides.map((entry) => entry.agentId ?? "");
  const defaultMissing = !models.defaultModelListed;
  if (!defaultMissing && !overrides.length) return null;
  const listed = chatModels(models);
  const pickable = listed.includes(props.value);
  // Without a listed model to make the default, the button would leave the default unlisted: it waits for one.
  const fixable = defaultMissing ? listed.length > 0 : true;
  const fix = async () => {
    setSaving(true);
    setError(null);
    try {
      await props.onFix({ defaultModel: defaultMissing ? props.value : null, inheritAgents: agents });
    } catch (caught) {
      setError(caught instanceof Error ? caught.message : String(caught));
    } finally {
      setSaving(false);
    }
  };
  const label = [
    defaultMissing ? `Use ${pickable ? props.value : "this model"} as the default` : null,
    agents.length ? `${defaultMissing ? "let" : "Let"} ${joined(agents)} inherit the chat's model` : null,
  ]
    .filter(Boolean)
    .join("; ");
  return (
    <div className="banner warn" role="status" data-testid="model-notice">
      {defaultMissing ? (
        <p data-testid="default-model-notice">
          The default model <code>{models.defaultModel}</code> is not offered by the model gateway.{" "}
          {listed.length ? "Pick a model above to chat with, and save it as the default." : "The gateway lists no model at all."}
        </p>
      ) : null}
      {overrides.length ? (
        <p data-testid="override-notice">
          The model gateway does not list{" "}
          {overrides.map((entry, index) => (
            <span key={entry.agentId}>
              {index ? ", " : ""}
              <code>{entry.model}</code> ({entry.agentId}&apos;s override)
            </span>
          ))}
          : chats are refused until {overrides.length > 1 ? "they are" : "it is"} changed, {fixable ? "here or " : ""}in{" "}
          <a href={href({ page: "settings", section: "agents" })}>Settings → Agents</a>.
        </p>
      ) : null}
      {fixable ? (
        <div className="banner-actions">
          <button
            type="button"
            className="primary"
            disabled={(defaultMissing && !pickable) || saving}
            onClick={() => void fix()}
            data-testid={defaultMissing ? "save-default-model" : "inherit-unlisted-overrides"}
          >
            {saving ? "Saving…" : label}
          </button>
        </div>
      ) : null}
      <ErrorText error={error && `Could not save: ${error}`} />
    </div>
  );
}
