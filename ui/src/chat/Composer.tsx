import type { FileUIPart } from "ai";
import { useEffect, useRef, useState, type ClipboardEvent, type DragEvent, type FormEvent, type KeyboardEvent } from "react";
import { AttachmentPicker, useAttachments } from "./attachments";

/** The message box: Enter sends, Shift+Enter adds a line; Send and Stop share one place and size,
 * or, when a message may be sent while a turn runs (`sendWhileBusy`), stand side by side. With a session,
 * files can be attached (uploaded to it at once; sent with the message while no turn runs). */
export function Composer(props: {
  busy: boolean;
  sendWhileBusy?: boolean;
  disabled?: boolean;
  onSend: (text: string, files: FileUIPart[]) => void;
  // The session files are uploaded to (a new chat creates it on the first attachment); absent: no attaching.
  attachTo?: () => Promise<string>;
  onStop: () => void;
  placeholder?: string;
}) {
  const [text, setText] = useState("");
  const attachments = useAttachments(props.attachTo);
  const files = attachments.files;
  const box = useRef<HTMLTextAreaElement>(null);

  useEffect(() => {
    box.current?.focus();
  }, []);

  const send = () => {
    const value = text.trim();
    // A file still uploading would be left out: the message waits for it.
    if ((!value && !files.length) || attachments.uploading || (props.busy && (files.length || !props.sendWhileBusy))) return;
    if (props.disabled) return;
    props.onSend(value, files);
    setText("");
    attachments.clear();
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

  // A pasted or dropped file is attached as a picked one is (text pastes stay text).
  const onPaste = (event: ClipboardEvent<HTMLTextAreaElement>) => {
    if (!props.attachTo || !event.clipboardData.files.length) return;
    event.preventDefault();
    void attachments.add(Array.from(event.clipboardData.files));
  };
  const onDrop = (event: DragEvent<HTMLFormElement>) => {
    if (!props.attachTo || !event.dataTransfer.files.length) return;
    event.preventDefault();
    void attachments.add(Array.from(event.dataTransfer.files));
  };

  const onSubmit = (event: FormEvent) => {
    event.preventDefault();
    if (props.busy && !props.sendWhileBusy) props.onStop();
    else send();
  };

  return (
    <form
      className="composer"
      onSubmit={onSubmit}
      aria-label="Send a message"
      onDragOver={(event) => {
        if (props.attachTo && event.dataTransfer.types.includes("Files")) event.preventDefault();
      }}
      onDrop={onDrop}
    >
      <label htmlFor="composer-input" className="visually-hidden">
        Message
      </label>
      {props.attachTo ? (
        <AttachmentPicker attachments={attachments} disabled={props.disabled} />
      ) : null}
      <textarea
        id="composer-input"
        ref={box}
        rows={2}
        value={text}
        placeholder={props.placeholder ?? "Message popagent (Enter to send, Shift+Enter for a new line)"}
        onChange={(event) => setText(event.target.value)}
        onKeyDown={onKeyDown}
        onPaste={onPaste}
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
        <button type="submit" className="composer-button primary" disabled={(!text.trim() && !files.length) || attachments.uploading > 0 || props.disabled}
          data-testid="send">
          Send
        </button>
      )}
    </form>
  );
}
