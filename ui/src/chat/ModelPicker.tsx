import { useId } from "react";
import type { ModelsOut } from "../api/types";

export function formatTokens(tokens: number): string {
  if (tokens >= 1_000_000) return `${+(tokens / 1_000_000).toFixed(2)}M`;
  if (tokens >= 1_000) return `${+(tokens / 1_000).toFixed(1)}K`;
  return String(tokens);
}

/** Models and context windows come from GET /api/models; the persisted default is preselected by the caller. */
export function ModelPicker(props: { models: ModelsOut | undefined; value: string; onChange: (model: string) => void; disabled?: boolean }) {
  const id = useId();
  const catalog = props.models?.models ?? [];
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
