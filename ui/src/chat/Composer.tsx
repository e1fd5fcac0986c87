import type { FileUIPart } from "ai";
import { useEffect, useRef, useState, type FormEvent, type KeyboardEvent } from "react";
import { AttachmentPicker } from "./attachments";

/** The message box: Enter sends, Shift+Enter adds a line; Send and Stop share one place and size,
 * or, when a message may be sent while a turn runs (`sendWhileBusy`), stand side by side. With a session,
 * files can be attached (uploaded to it at once; sent with the message while no turn runs). */
export function Composer(props: {
  busy: boolean;
  sendWhileBusy?: boolean;
  disabled?: boolean;
  onSend: (text: string, files: FileUIPart[]) => void;
  sessionId?: string;
  onStop: () => void;
  placeholder?: string;
}) {
  const [text, setText] = useState("");
  const [files, setFiles] = useState<FileUIPart[]>([]);
  const box = useRef<HTMLTextAreaElement>(null);

  useEffect(() => {
    box.current?.focus();
  }, []);

  const send = () => {
    const value = text.trim();
    if ((!value && !files.length) || (props.busy && (files.length || !props.sendWhileBusy)) || props.disabled) return;
    props.onSend(value, files);
    setText("");
    setFiles([]);
    box.current?.focus();
  };

  const onKeyDown = (event: KeyboardEvent<HTMLTextAreaElement>) => {
    if (event.key === "Enter" && !event.shiftKey && !event.nativeEvent.isComposing) {
      event.preventDefault();
      send();
    } else if (event.key === "Escape" && props.busy) {
      event.preventDefault();
      props.onStop();
    }
  };

  const onSubmit = (event: FormEvent) => {
    event.preventDefault();
    if (props.busy && !props.sendWhileBusy) props.onStop();
    else send();
  };

  return (
    <form className="composer" onSubmit={onSubmit} aria-label="Send a message">
      <label htmlFor="composer-input" className="visually-hidden">
        Message
      </label>
      {props.sessionId ? (
        <AttachmentPicker sessionId={props.sessionId} files={files} onChange={setFiles} disabled={props.disabled} />
      ) : null}
      <textarea
        id="composer-input"
        ref={box}
        rows={2}
        value={text}
        placeholder={props.placeholder ?? "Message popagent (Enter to send, Shift+Enter for a new line)"}
        onChange={(event) => setText(event.target.value)}
        onKeyDown={onKeyDown}
        disabled={props.disabled}
      />
      {props.busy && props.sendWhileBusy ? (
        <button type="button" className="composer-button stop" data-testid="stop" onClick={props.onStop}>
          Stop
        </button>
      ) : null}
      {props.busy && !props.sendWhileBusy ? (
        <button type="submit" className="composer-button stop" data-testid="stop">
          Stop
        </button>
      ) : (
        <button type="submit" className="composer-button primary" disabled={(!text.trim() && !files.length) || props.disabled} data-testid="send">
          Send
        </button>
      )}
    </form>
  );
}
