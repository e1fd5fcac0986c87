// Double texting: what a message sent while a turn runs does (the session's `doubleTexting`, see
// docs/turns.md), the picker that sets it, the queued turns shown after the conversation, and the
// pieces of the AI SDK plumbing that let a queued turn's own stream become useChat's when it starts.
import { DefaultChatTransport, type ChatTransport, type UIMessage, type UIMessageChunk } from "ai";
import { useId } from "react";
import type { SessionOut } from "../api/types";
import { textOf } from "./meta";

export type DoubleTexting = SessionOut["doubleTexting"];

export const POLICIES: ReadonlyArray<{ value: DoubleTexting; label: string; short: string; explain: string }> = [
  { value: "reject", label: "Wait", short: "send once the answer ends", explain: "A new message can be sent once the answer has ended." },
  { value: "enqueue", label: "Queue", short: "it runs after the answer", explain: "A new message waits in a queue and runs when the answer ends." },
  {
    value: "interrupt",
    label: "Interrupt",
    short: "stop the answer (kept), run it",
    explain: "A new message stops the answer (what it said so far is kept) and runs.",
  },
  {
    value: "rollback",
    label: "Replace",
    short: "drop the answer and its question, run it",
    explain: "A new message stops the answer, removes it and its question from the chat, and runs.",
  },
];

/** The session's double-texting policy: a select, saved as it changes. */
export function DoubleTextingPicker(props: {
  value: DoubleTexting;
  saving: boolean;
  error: string | null;
  onChange: (value: DoubleTexting) => void;
}) {
  const id = useId();
  const current = POLICIES.find((policy) => policy.value === props.value);
  return (
    <span className="double-texting">
      <label htmlFor={id}>During an answer</label>
      <select
        id={id}
        data-testid="double-texting"
        value={props.value}
        disabled={props.saving}
        aria-describedby={`${id}-explain`}
        title={current?.explain}
        onChange={(event) => props.onChange(event.target.value as DoubleTexting)}
      >
        {POLICIES.map((policy) => (
          <option key={policy.value} value={policy.value} title={policy.explain}>
            {policy.label}: {policy.short}
          </option>
        ))}
      </select>
      <span id={`${id}-explain`} className="visually-hidden">
        {current?.explain}
      </span>
      {props.error ? (
        <span className="error-text" role="alert" data-testid="double-texting-error">
          not saved: {props.error}
        </span>
      ) : null}
    </span>
  );
}

/** A turn waiting on the session: from the session's `queuedTurns`, or sent from this page (`own`:
 * its stream is read here, and handed to useChat when the turn starts). */
export type QueuedTurn = {
  message: UIMessage;
  turnId: string | null;
  ahead: number | null;
  own: boolean;
  cancelling?: boolean;
};

export function fromServer(turns: SessionOut["queuedTurns"]): QueuedTurn[] {
  return turns.map((turn) => ({ message: turn.message as unknown as UIMessage, turnId: turn.turnId, ahead: null, own: false }));
}

/** The queued turns, after the conversation: each the user's message with a "queued" badge and Cancel. */
export function QueuedTurns(props: { turns: QueuedTurn[]; onCancel: (turn: QueuedTurn) => void }) {
  return (
    <>
      {props.turns.map((turn) => (
        <article
          key={turn.message.id}
          className="message user queued"
          data-testid="queued-turn"
          data-turn-id={turn.turnId ?? ""}
          aria-label="You (queued)"
        >
          <div className="message-body">
            <div className="text">{textOf(turn.message)}</div>
          </div>
          <footer className="message-foot muted">
            <span className="badge pending" data-testid="queued-badge">
              {turn.turnId === null
                ? "queueing…"
                : turn.ahead === null
                  ? "queued"
                  : `queued, ${turn.ahead} ${turn.ahead === 1 ? "turn" : "turns"} ahead`}
            </span>
            <button
              type="button"
              className="ghost small"
              data-testid="cancel-queued"
              aria-label="Cancel queued message"
              disabled={turn.turnId === null || turn.cancelling}
              onClick={() => props.onCancel(turn)}
            >
              {turn.cancelling ? "Cancelling…" : "Cancel"}
            </button>
          </footer>
        </article>
      ))}
    </>
  );
}

/** The chat's transport, which can also hand useChat a stream that is already open: a queued turn
 * posted by this page (see `readUntilStart`) is adopted by `sendMessage` of its message when it starts.
 * Following the session (the resume route) is asked here first: useChat is handed only a turn that runs. */
export class AdoptingTransport extends DefaultChatTransport<UIMessage> implements ChatTransport<UIMessage> {
  private readonly adopted = new Map<string, ReadableStream<UIMessageChunk>>();
  private followed: ReadableStream<UIMessageChunk> | null = null;

  adopt(messageId: string, stream: ReadableStream<UIMessageChunk>) {
    this.adopted.set(messageId, stream);
  }

  /** The stream of the turn running on the session, from its first chunk (the resume route), or null
   * when none runs. `skipped`: an answer whose stream just ended here; its turn's record says it runs
   * until its log is settled, and the route would send all of it again, so it is read to its end
   * and the route asked once more (for a turn queued behind it). */
  async running(chatId: string, skipped: string | null): Promise<ReadableStream<UIMessageChunk> | null> {
    for (let pass = 0; pass < 5; pass += 1) {
      const stream = await super.reconnectToStream({ chatId });
      if (stream === null || skipped === null) return stream;
      const reader = stream.getReader();
      const first = await reader.read();
      if (first.done) return null;
      if (first.value.type !== "start" || first.value.messageId !== skipped) return prepended(first.value, reader);
      while (!(await reader.read()).done) {
        // the skipped turn, read to its end
      }
    }
    return null;
  }

  /** useChat's next resume reads this stream (from `running`), so it starts only once a turn is known to run. */
  handOver(stream: ReadableStream<UIMessageChunk>) {
    this.followed = stream;
  }

  override async reconnectToStream(options: Parameters<ChatTransport<UIMessage>["reconnectToStream"]>[0]) {
    const stream = this.followed;
    this.followed = null;
    return stream ?? super.reconnectToStream(options);
  }

  override async sendMessages(options: Parameters<ChatTransport<UIMessage>["sendMessages"]>[0]) {
    const newest = options.messages[options.messages.length - 1];
    const id = options.trigger === "submit-message" ? newest?.id : undefined;
    const stream = id === undefined ? undefined : this.adopted.get(id);
    if (id !== undefined && stream) {
      this.adopted.delete(id);
      return stream;
    }
    return super.sendMessages(options);
  }
}

export type QueuedOutcome =
  | { kind: "started"; stream: ReadableStream<UIMessageChunk> }
  | { kind: "ended"; reason: "cancelled" | "failed"; text: string };

/** Reads a queued turn's stream up to its `start` chunk, reporting each `data-turnQueued`; then the
 * rest of the stream from `start` on (for useChat), or how it ended before it started. */
export async function readUntilStart(
  stream: ReadableStream<UIMessageChunk>,
  onQueued: (turnId: string, ahead: number) => void,
  onCancel: () => void,
): Promise<QueuedOutcome> {
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return { kind: "ended", reason: "failed", text: "the stream ended before the turn started" };
    if (value.type === "data-turnQueued") {
      const data = value.data as { turnId?: unknown; ahead?: unknown };
      if (typeof data.turnId === "string") onQueued(data.turnId, typeof data.ahead === "number" ? data.ahead : 0);
      continue;
    }
    if (value.type === "abort") {
      void reader.cancel().catch(() => undefined);
      return { kind: "ended", reason: "cancelled", text: "cancelled" };
    }
    if (value.type === "error") {
      void reader.cancel().catch(() => undefined);
      return { kind: "ended", reason: "failed", text: value.errorText };
    }
    return { kind: "started", stream: prepended(value, reader, onCancel) };
  }
}

/** The rest of a stream whose first chunk was read already, that chunk first. */
function prepended(
  first: UIMessageChunk,
  reader: ReadableStreamDefaultReader<UIMessageChunk>,
  onCancel: () => void = () => undefined,
): ReadableStream<UIMessageChunk> {
  let sentFirst = false;
  return new ReadableStream<UIMessageChunk>({
    async pull(controller) {
      if (!sentFirst) {
        sentFirst = true;
        controller.enqueue(first);
        return;
      }
      const next = await reader.read();
      if (next.done) controller.close();
      else controller.enqueue(next.value);
    },
    async cancel(reason) {
      onCancel();
      await reader.cancel(reason).catch(() => undefined);
    },
  });
}
