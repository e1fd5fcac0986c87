// Forms with unsaved edits. Leaving the page (a link inside the app, or closing the tab) asks
// first while any form here is dirty: App.tsx asks for in-app links, the browser for the tab.
import { useEffect, useId } from "react";

const dirty = new Map<string, string>();

export function hasUnsaved(): string[] {
  return [...dirty.values()];
}

export function clearUnsaved(): void {
  dirty.clear();
}

/** Marks the calling form (by `title`) as having unsaved edits while `isDirty`. */
export function useUnsaved(isDirty: boolean, title: string): void {
  const id = useId();
  useEffect(() => {
    if (isDirty) dirty.set(id, title);
    else dirty.delete(id);
    return () => {
      dirty.delete(id);
    };
  }, [id, isDirty, title]);
}

if (typeof window !== "undefined") {
  window.addEventListener("beforeunload", (event) => {
    if (dirty.size) event.preventDefault();
  });
}
