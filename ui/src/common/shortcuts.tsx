import { Modal } from "./Modal";

// Apple keyboards use ⌘ where others use Ctrl (as the browsers' own shortcuts do).
const APPLE = typeof navigator !== "undefined" && /Mac|iPhone|iPad/.test(navigator.platform);
const MOD = APPLE ? "⌘" : "Ctrl";

export type ShortcutAction = "sheet" | "composer" | "newChat" | "searchChats";

// Typing there must reach the field: `?` and `/` are characters there, not commands.
const NON_TEXT_INPUTS = new Set(["checkbox", "radio", "button", "submit", "reset", "range", "color", "file", "image"]);

function isTyping(target: EventTarget | null): boolean {
  if (!(target instanceof HTMLElement)) return false;
  if (target.isContentEditable || target instanceof HTMLTextAreaElement || target instanceof HTMLSelectElement) return true;
  return target instanceof HTMLInputElement && !NON_TEXT_INPUTS.has(target.type);
}

/** The app-wide shortcut `event` stands for, if any. With a modifier they work in a text field too
 * (they type nothing); the bare keys only outside one. None while a modal dialog is open. */
export function shortcutOf(event: KeyboardEvent): ShortcutAction | null {
  if (event.defaultPrevented || event.isComposing || event.altKey) return null;
  if (document.querySelector("[role='dialog'][aria-modal='true']")) return null;
  const mod = APPLE ? event.metaKey && !event.ctrlKey : event.ctrlKey && !event.metaKey;
  const key = event.key.toLowerCase();
  if (mod && event.shiftKey && key === "o") return "newChat";
  if (mod && !event.shiftKey && key === "k") return "searchChats";
  if (event.ctrlKey || event.metaKey || isTyping(event.target)) return null;
  if (event.key === "?") return "sheet";
  if (event.key === "/") return "composer";
  return null;
}

// Every row is a shortcut the app handles: App.tsx (the first four), chat/Composer.tsx,
// chat/Message.tsx (editing), sessions/Sidebar.tsx (renaming) and this dialog.
const ROWS: { keys: string[]; what: string }[] = [
  { keys: ["?"], what: "Show this list" },
  { keys: ["/"], what: "Focus the message box (in a chat)" },
  { keys: [MOD, "Shift", "O"], what: "Start a new chat" },
  { keys: [MOD, "K"], what: "Search chats" },
  { keys: ["Enter"], what: "Send the message (in the message box)" },
  { keys: ["Shift", "Enter"], what: "Start a new line (in the message box)" },
  { keys: ["Esc"], what: "Stop the reply being written (in the message box)" },
  { keys: ["Esc"], what: "Cancel editing a message or renaming a chat; close this list" },
];

/** The keyboard shortcuts sheet (`?`). */
export function ShortcutsSheet(props: { open: boolean; onClose: () => void }) {
  return (
    <Modal open={props.open} title="Keyboard shortcuts" onCancel={props.onClose} className="shortcuts-sheet">
      <dl className="shortcut-list" data-testid="shortcut-list">
        {ROWS.map((row) => (
          <div key={row.what} className="shortcut-row">
            <dt>
              {row.keys.map((key, index) => (
                <span key={key}>
                  {index ? <span aria-hidden="true">+</span> : null}
                  <kbd>{key}</kbd>
                </span>
              ))}
            </dt>
            <dd>{row.what}</dd>
          </div>
        ))}
      </dl>
      <div className="modal-actions">
        <button type="button" onClick={props.onClose} autoFocus>
          Close
        </button>
      </div>
    </Modal>
  );
}
