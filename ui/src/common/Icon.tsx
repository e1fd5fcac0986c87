// A few stroke icons as inline SVG: no icon font, no outside request, same look everywhere.
const PATHS = {
  pencil: "M4 20h4L19 9l-4-4L4 16v4zM14 6l4 4",
  archive: "M3 5h18v4H3zM5 9v10h14V9M10 13h4",
  restore: "M4 12a8 8 0 1 0 2.3-5.6M4 4v4h4",
  trash: "M4 7h16M9 7V4h6v3M6 7l1 13h10l1-13M10 11v6M14 11v6",
  lock: "M6 11h12v9H6zM8 11V8a4 4 0 0 1 8 0v3",
  menu: "M4 6h16M4 12h16M4 18h16",
  close: "M6 6l12 12M18 6L6 18",
} as const;

export type IconName = keyof typeof PATHS;

export function Icon({ name, label }: { name: IconName; label?: string }) {
  return (
    <svg
      className="icon"
      viewBox="0 0 24 24"
      width="16"
      height="16"
      fill="none"
      stroke="currentColor"
      strokeWidth="2"
      strokeLinecap="round"
      strokeLinejoin="round"
      role={label ? "img" : undefined}
      aria-label={label}
      aria-hidden={label ? undefined : true}
    >
      <path d={PATHS[name]} />
    </svg>
  );
}
