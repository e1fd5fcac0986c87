import { useEffect, useState } from "react";
import { Icon } from "./Icon";
import { onThemeStored, applyTheme, isTheme, storedTheme, storeTheme, type Theme } from "./theme";

const LABELS: Record<Theme, string> = { system: "System", light: "Light", dark: "Dark" };

/** The header's colour scheme choice: the system's, or always light, or always dark. */
export function ThemePicker() {
  const [theme, setTheme] = useState<Theme>(() => storedTheme());
  useEffect(
    () =>
      onThemeStored((next) => {
        applyTheme(next);
        setTheme(next);
      }),
    [],
  );
  return (
    <label className="theme-picker">
      <Icon name="theme" />
      <span className="visually-hidden">Theme</span>
      <select
        value={theme}
        onChange={(event) => {
          const next = event.target.value;
          if (!isTheme(next)) return;
          storeTheme(next);
          setTheme(next);
        }}
      >
        {(Object.keys(LABELS) as Theme[]).map((value) => (
          <option key={value} value={value}>
            {LABELS[value]}
          </option>
        ))}
      </select>
    </label>
  );
}
