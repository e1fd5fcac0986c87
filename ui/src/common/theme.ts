// The colour scheme picked in the header, kept for this browser (localStorage, shared by its tabs).
// "system" follows the OS; "light" and "dark" set `data-theme` on <html>, which styles.css turns
// into `color-scheme`. public/theme.js applies the stored choice before first paint, so this key
// and the attribute must stay as that script reads them.

export const THEMES = ["system", "light", "dark"] as const;
export type Theme = (typeof THEMES)[number];

const STORAGE_KEY = "popagent.theme";

export function isTheme(value: unknown): value is Theme {
  return typeof value === "string" && (THEMES as readonly string[]).includes(value);
}

export function storedTheme(): Theme {
  try {
    const value = localStorage.getItem(STORAGE_KEY);
    return isTheme(value) ? value : "system";
  } catch {
    return "system";
  }
}

export function applyTheme(theme: Theme): void {
  if (theme === "system") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
}

/** Applies `theme` and keeps it for the next load ("system" forgets the choice). */
export function storeTheme(theme: Theme): void {
  applyTheme(theme);
  try {
    if (theme === "system") localStorage.removeItem(STORAGE_KEY);
    else localStorage.setItem(STORAGE_KEY, theme);
  } catch {
    // Storage refused (private mode, quota): the choice still holds for this page.
  }
}

/** Calls `onChange` when another tab of this browser picks a scheme. */
export function onThemeStored(onChange: (theme: Theme) => void): () => void {
  const listener = (event: StorageEvent) => {
    if (event.key === STORAGE_KEY || event.key === null) onChange(storedTheme());
  };
  window.addEventListener("storage", listener);
  return () => window.removeEventListener("storage", listener);
}
