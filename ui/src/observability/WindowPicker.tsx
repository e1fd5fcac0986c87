import { useId } from "react";
import { PRESETS, type Window } from "./time";

/** The time filter: a preset, or a custom from/to. */
export function WindowPicker(props: { value: Window; onChange: (window: Window) => void }) {
  const id = useId();
  const { value, onChange } = props;
  return (
    <div className="obs-field obs-window">
      <label htmlFor={`${id}-preset`}>Time</label>
      <select id={`${id}-preset`} value={value.preset} onChange={(e) => onChange({ ...value, preset: e.target.value })}>
        {PRESETS.map((preset) => (
          <option key={preset.id} value={preset.id}>
            {preset.label}
          </option>
        ))}
        <option value="custom">Custom range</option>
      </select>
      {value.preset === "custom" ? (
        <>
          <label htmlFor={`${id}-from`} className="visually-hidden">
            From
          </label>
          <input
            id={`${id}-from`}
            type="datetime-local"
            value={value.from}
            onChange={(e) => onChange({ ...value, from: e.target.value })}
          />
          <span aria-hidden="true">–</span>
          <label htmlFor={`${id}-to`} className="visually-hidden">
            To
          </label>
          <input id={`${id}-to`} type="datetime-local" value={value.to} onChange={(e) => onChange({ ...value, to: e.target.value })} />
        </>
      ) : null}
    </div>
  );
}
