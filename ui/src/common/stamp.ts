/** A server timestamp in the reader's locale; "—" for none, and an unreadable one as it came. */
export function stamp(iso: string | null | undefined): string {
  if (!iso) return "—";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}
