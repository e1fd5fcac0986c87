import type { UIMessage } from "ai";
import { useEffect, useId, useRef, useState, type FormEvent } from "react";
import { api } from "../api/client";
import type { HookRunOut } from "../api/types";
import { CopyButton } from "../common/CopyButton";
import { Icon } from "../common/Icon";
import { messageOf } from "../common/useLoad";
import { HookRuns } from "./HookTimeline";
import { formatTokens } from "./ModelPicker";
import { MessageParts } from "./Parts";
import { failureOf, interruptedOf, modelOf, stoppedOf, textOf, traceIdOf, turnIdOf, usageOf } from "./meta";
import { traceHref } from "./traceLink";

export type MessageActions = {
  /** The last assistant message: run its turn again (the same user message id). */
  onRetry?: () => void;
  /** A user message: send it again with new text (the same id); the branch it leaves is kept as a version. */
  onEdit?: (text: string) => void;
  /** An edited user message: which of its versions is shown, and showing another. */
  versions?: { shown: number; count: number; onShow: (version: number) => void };
};

/** One message: its parts, how its turn ended, and its actions (copy, retry, edit, feedback, trace). */
export function Message(props: { message: UIMessage; sessionId: string; streaming: boolean; busy: boolean } & MessageActions) {
  const { message } = props;
  const [editing, setEditing] = useState(false);
  const turnId = message.role === "assistant" ? turnIdOf(message) : null;
  const traceId = message.role === "assistant" ? traceIdOf(message) : null;
  const usage = usageOf(message);
  const model = modelOf(message);
  const stopped = stoppedOf(message);
  const interrupted = !stopped && interruptedOf(message);
  const failure = failureOf(message);
  const text = textOf(message);
  const settled = !props.streaming;
  return (
    <article
      className={`message ${message.role}${failure ? " failed" : ""}`}
      data-testid={`message-${message.role}`}
      data-message-id={message.id}
      data-turn-id={turnId ?? ""}
      aria-label={message.role === "user" ? "You" : "popagent"}
    >
      {editing && props.onEdit ? (
        <EditBox
          initial={text}
          onCancel={() => setEditing(false)}
          onSend={(next) => {
            setEditing(false);
            props.onEdit?.(next);
          }}
        />
      ) : (
        <div className="message-body">
          <MessageParts message={message} streaming={props.streaming} />
        </div>
      )}
      {failure && settled ? (
        <div className="turn-failure" role="alert" data-testid="message-failure">
          <p>
            <strong>This answer failed.</strong> <span data-testid="failure-reason">{failure}</span>
          </p>
          {props.onRetry ? (
            <button type="button" className="primary small" onClick={props.onRetry} disabled={props.busy} data-testid="retry">
              <Icon name="retry" /> Retry
            </button>
          ) : null}
        </div>
      ) : null}
      {settled && !editing ? (
        <footer className="message-foot muted">
          {stopped ? (
            <span className="badge warn" data-testid="message-stopped">
              stopped
            </span>
          ) : null}
          {interrupted ? (
            <span className="badge warn" data-testid="message-interrupted" title="The turn did not finish">
              interrupted
            </span>
          ) : null}
          {model ? <span>{model}</span> : null}
          {usage ? (
            <span>
              {formatTokens(usage.input)} in · {formatTokens(usage.output)} out
            </span>
          ) : null}
          {props.versions ? <Versions {...props.versions} busy={props.busy} /> : null}
          <span className="message-actions" data-testid="message-actions">
            {text ? <CopyButton text={text} label={message.role === "user" ? "Copy message" : "Copy answer"} /> : null}
            {props.onRetry && !failure ? (
              <button type="button" className="ghost small" onClick={props.onRetry} disabled={props.busy} data-testid="regenerate" aria-label="Regenerate answer">
                <Icon name="retry" /> Regenerate
              </button>
            ) : null}
            {props.onEdit ? (
              <button type="button" className="ghost small" onClick={() => setEditing(true)} disabled={props.busy} data-testid="edit" aria-label="Edit and resend">
                <Icon name="edit" /> Edit
              </button>
            ) : null}
            {traceId && !failure ? <Feedback sessionId={props.sessionId} messageId={message.id} traceId={traceId} turnId={turnId} /> : null}
            {traceId ? (
              <a className="ghost small trace-link" href={traceHref(traceId)} data-testid="trace-link">
                <Icon name="trace" /> Trace
              </a>
            ) : null}
          </span>
          {turnId ? <TurnHooks sessionId={props.sessionId} turnId={turnId} /> : null}
        </footer>
      ) : null}
    </article>
  );
}

/** `< 2/3 >`: the versions of an edited message, each a branch of the chat from it on. */
function Versions(props: { shown: number; count: number; onShow: (version: number) => void; busy: boolean }) {
  return (
    <span className="message-versions" role="group" aria-label="Versions of this message" data-testid="message-versions">
      <button
        type="button"
        className="ghost small"
        aria-label="Previous version"
        disabled={props.busy || props.shown <= 1}
        onClick={() => props.onShow(props.shown - 1)}
      >
        ‹
      </button>
      <span data-testid="message-version">
        {props.shown}/{props.count}
      </span>
      <button
        type="button"
        className="ghost small"
        aria-label="Next version"
        disabled={props.busy || props.shown >= props.count}
        onClick={() => props.onShow(props.shown + 1)}
      >
        ›
      </button>
    </span>
  );
}

function EditBox(props: { initial: string; onSend: (text: string) => void; onCancel: () => void }) {
  const [text, setText] = useState(props.initial);
  const box = useRef<HTMLTextAreaElement>(null);
  const id = useId();
  useEffect(() => {
    box.current?.focus();
    box.current?.select();
  }, []);
  const submit = (event: FormEvent) => {
    event.preventDefault();
    if (text.trim()) props.onSend(text.trim());
  };
  return (
    <form className="edit-box" onSubmit={submit} aria-label="Edit message">
      <label htmlFor={id} className="visually-hidden">
        Edited message
      </label>
      <textarea
        id={id}
        ref={box}
        rows={3}
        value={text}
        onChange={(event) => setText(event.target.value)}
        onKeyDown={(event) => {
          if (event.key === "Escape") props.onCancel();
          if (event.key === "Enter" && !event.shiftKey && !event.nativeEvent.isComposing) submit(event);
        }}
      />
      <div className="banner-actions">
        <button type="button" className="ghost small" onClick={props.onCancel}>
          Cancel
        </button>
        <button type="submit" className="primary small" disabled={!text.trim()} data-testid="edit-send">
          Send
        </button>
      </div>
    </form>
  );
}

/** Thumbs up or down on an answer, with an optional comment (POST /api/observability/feedback). */
function Feedback(props: { sessionId: string; messageId: string; traceId: string; turnId: string | null }) {
  const [given, setGiven] = useState<"up" | "down" | null>(null);
  const [asking, setAsking] = useState<"up" | "down" | null>(null);
  const [comment, setComment] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [sending, setSending] = useState(false);
  const send = async (rating: "up" | "down", text: string) => {
    setSending(true);
    setError(null);
    try {
      await api.feedback({
        sessionId: props.sessionId,
        messageId: props.messageId,
        ...(props.turnId ? { turnId: props.turnId } : {}),
        traceId: props.traceId,
        rating,
        comment: text,
      });
      setGiven(rating);
      setAsking(null);
    } catch (caught) {
      setError(`Feedback not saved: ${messageOf(caught)}`);
    } finally {
      setSending(false);
    }
  };
  if (given) {
    return (
      <span className="feedback-given" data-testid="feedback-given" data-rating={given}>
        <Icon name={given} /> Thanks for the feedback
      </span>
    );
  }
  return (
    <span className="feedback" data-testid="feedback">
      {(["up", "down"] as const).map((rating) => (
        <button
          key={rating}
          type="button"
          className={`ghost small${asking === rating ? " pressed" : ""}`}
          aria-label={rating === "up" ? "Good answer" : "Bad answer"}
          aria-pressed={asking === rating}
          onClick={() => setAsking(asking === rating ? null : rating)}
          data-testid={`feedback-${rating}`}
        >
          <Icon name={rating} />
        </button>
      ))}
      {asking ? (
        <form
          className="feedback-form"
          onSubmit={(event) => {
            event.preventDefault();
            void send(asking, comment.trim());
          }}
        >
          <label className="visually-hidden" htmlFor={`fb-${props.messageId}`}>
            Comment (optional)
          </label>
          <input
            id={`fb-${props.messageId}`}
            value={comment}
            maxLength={2000}
            placeholder={asking === "up" ? "What was good? (optional)" : "What went wrong? (optional)"}
            onChange={(event) => setComment(event.target.value)}
          />
          <button type="submit" className="primary small" disabled={sending} data-testid="feedback-send">
            Send
          </button>
        </form>
      ) : null}
      {error ? (
        <span role="alert" className="error-text">
          {error}
        </span>
      ) : null}
    </span>
  );
}

/** The hook runs of one turn, fetched when opened. */
function TurnHooks(props: { sessionId: string; turnId: string }) {
  const [runs, setRuns] = useState<HookRunOut[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [open, setOpen] = useState(false);
  useEffect(() => {
    if (!open) return;
    let live = true;
    api.hooks(props.sessionId).then(
      (answer) => live && setRuns(answer.runs.filter((run) => run.turnId === props.turnId)),
      (caught: unknown) => live && setError(messageOf(caught)),
    );
    return () => {
      live = false;
    };
  }, [open, props.sessionId, props.turnId]);
  return (
    <details className="turn-hooks" data-testid="turn-hooks" onToggle={(event) => setOpen(event.currentTarget.open)}>
      <summary>Hooks</summary>
      {error ? <p className="error-text">{error}</p> : null}
      {runs === null && !error ? <p className="muted">Loading…</p> : null}
      {runs && runs.length === 0 ? <p className="muted">No hook ran in this turn.</p> : null}
      {runs && runs.length ? <HookRuns runs={runs} /> : null}
    </details>
  );
}
