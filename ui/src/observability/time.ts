// The time window every observability view filters by: a preset ending now, or a custom range.
export const PRESETS: { id: string; label: string; ms: number }[] = [
  { id: "1h", label: "Last hour", ms: 3600_000 },
  { id: "6h", label: "Last 6 hours", ms: 6 * 3600_000 },
  { id: "24h", label: "Last 24 hours", ms: 24 * 3600_000 },
  { id: "7d", label: "Last 7 days", ms: 7 * 24 * 3600_000 },
  { id: "30d", label: "Last 30 days", ms: 30 * 24 * 3600_000 },
];

export type Window = { preset: string; from: string; to: string };

export const DEFAULT_WINDOW: Window = { preset: "24h", from: "", to: "" };

/** The window a link names by its preset (`?window=7d`), else the default. */
export function windowOfParam(preset: string | null): Window {
  return preset && PRESETS.some((p) => p.id === preset) ? { preset, from: "", to: "" } : DEFAULT_WINDOW;
}

/** The window as the API's since/until (ISO with a zone); a custom range from datetime-local inputs. */
export function windowParams(window: Window, now: number = Date.now()): { since?: string; until?: string } {
  if (window.preset === "custom") {
    const since = window.from ? new Date(window.from) : null;
    const until = window.to ? new Date(window.to) : null;
    return {
      since: since && !Number.isNaN(since.getTime()) ? since.toISOString() : undefined,
      until: until && !Number.isNaN(until.getTime()) ? until.toISOString() : undefined,
    };
  }
  const presetMs = (PRESETS.find((p) => p.id === window.preset) ?? PRESETS[2])?.ms ?? 24 * 3600_000;
  return { since: new Date(now - presetMs).toISOString(), until: new Date(now).toISOString() };
}

export function ms(value: number | null | undefined): string {
  if (value === null || value === undefined) return "—";
  if (value >= 10_000) return `${(value / 1000).toFixed(1)} s`;
  if (value >= 1000) return `${(value / 1000).toFixed(2)} s`;
  return `${value < 10 ? value.toFixed(2) : value.toFixed(0)} ms`;
}

export function count(value: number): string {
  if (value >= 1_000_000) return `${+(value / 1_000_000).toFixed(2)}M`;
  if (value >= 1_000) return `${+(value / 1_000).toFixed(1)}K`;
  return String(value);
}

export function usd(value: number | null | undefined): string {
  if (value === null || value === undefined) return "—";
  if (value === 0) return "$0";
  return value >= 1 ? `$${value.toFixed(2)}` : `$${+value.toPrecision(3)}`;
}
