// A browser notification when a turn asks for approval while this tab is hidden. Permission is
// asked only from the "Notify me" button (a user gesture), never on load.
import { useState } from "react";

function supported(): boolean {
  return typeof window !== "undefined" && "Notification" in window;
}

/** Shows "popagent needs your approval: <tool>" when the tab is hidden and permission was granted. */
export function notifyApproval(toolName: string): void {
  if (!supported() || document.visibilityState !== "hidden" || Notification.permission !== "granted") return;
  try {
    const note = new Notification(`popagent needs your approval: ${toolName}`, { tag: "popagent-approval" });
    note.onclick = () => {
      window.focus();
      note.close();
    };
  } catch {
    // Some browsers only allow notifications from a service worker: nothing to show then.
  }
}

/** "Notify me": asks for notification permission; says what the browser answered. Nothing when unsupported or granted. */
export function NotifyMe() {
  const [permission, setPermission] = useState<NotificationPermission | null>(supported() ? Notification.permission : null);
  if (permission === null || permission === "granted") return null;
  if (permission === "denied") {
    return (
      <span className="muted small-text" data-testid="notify-denied">
        Notifications are blocked for this site in the browser's settings.
      </span>
    );
  }
  return (
    <button
      type="button"
      className="ghost small"
      data-testid="notify-me"
      title="Show a browser notification when a turn asks for approval while this tab is in the background"
      onClick={() => {
        void Notification.requestPermission().then(setPermission, () => setPermission(Notification.permission));
      }}
    >
      Notify me
    </button>
  );
}
