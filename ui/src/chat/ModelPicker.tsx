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

/**
 * What the configuration names that the model gateway does not list (GET /api/models `unlistedModels`):
 * an unlisted default asks the user to pick a model, with one click to save the pick as the default;
 * an unlisted agent override says chats are refused until it is changed, and where.
 */
export function ModelNotice(props: { models: ModelsOut | undefined; value: string; onSaveDefault: (model: string) => Promise<void> }) {
  const [saving, setSaving] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const models = props.models;
  if (!models) return null;
  const overrides = models.unlistedModels.filter((entry) => entry.agentId);
  const defaultMissing = !models.defaultModelListed;
  if (!defaultMissing && !overrides.length) return null;
  const listed = chatModels(models);
  const pickable = listed.includes(props.value);
  const save = async () => {
    setSaving(true);
    setError(null);
    try {
      await props.onSaveDefault(props.value);
    } catch (caught) {
      setError(caught instanceof Error ? caught.message : String(caught));
    } finally {
      setSaving(false);
    }
  };
  return (
    <div className="banner warn" role="status">
      {defaultMissing ? (
        <div data-testid="default-model-notice">
          <p>
            The default model <code>{models.defaultModel}</code> is not offered by the model gateway.{" "}
            {listed.length ? "Pick a model above to chat with, and save it as the default." : "The gateway lists no model at all."}
          </p>
          {listed.length ? (
            <div className="banner-actions">
              <button type="button" className="primary" disabled={!pickable || saving} onClick={() => void save()} data-testid="save-default-model">
                {saving ? "Saving…" : `Use ${pickable ? props.value : "this model"} as the default`}
              </button>
            </div>
          ) : null}
          <ErrorText error={error && `Could not save the default: ${error}`} />
        </div>
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
          : chats are refused until it is changed in <a href={href({ page: "settings", section: "agents" })}>Settings → Agents</a>.
        </p>
      ) : null}
    </div>
  );
}
