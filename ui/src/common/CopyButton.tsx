import { useEffect, useState } from "react";
import { Icon } from "./Icon";

/** Copies `text` to the clipboard and says so for two seconds. */
export function CopyButton({ text, label = "Copy", className = "" }: { text: string; label?: string; className?: string }) {
  const [state, setState] = useState<"idle" | "copied" | "failed">("idle");
  useEffect(() => {
    if (state === "idle") return;
    const timer = setTimeout(() => setState("idle"), 2000);
    return () => clearTimeout(timer);
  }, [state]);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      setState("copied");
    } catch {
      setState("failed");
    }
  };
  const shown = state === "copied" ? "Copied" : state === "failed" ? "Copy failed" : "Copy";
  return (
    // The name holds the visible word (WCAG 2.5.3): "Copy code", then "Copied" while it says so.
    <button
      type="button"
      className={`ghost small copy-button ${className}`}
      onClick={() => void copy()}
      aria-label={state === "idle" ? label : shown}
      data-testid="copy"
      data-state={state}
    >
      <Icon name={state === "copied" ? "check" : "copy"} />
      <span aria-live="polite">{shown}</span>
    </button>
  );
}
