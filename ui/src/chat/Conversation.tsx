import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport, type UIMessage } from "ai";
import { useCallback, useEffect, useLayoutEffect, useMemo, useRef, useState } from "react";
import { authedFetch } from "../api/auth";
import { api, ApiError } from "../api/client";
import type { ChatTurnCreate, HookRunOut, ModelsOut, SessionOut, SessionSummary, StoredMessage } from "../api/types";
import { Icon } from "../common/Icon";
import { messageOf } from "../common/useLoad";
import { Composer } from "./Composer";
import { HookTimeline } from "./HookTimeline";
import { ModelNotice, ModelPicker } from "./ModelPicker";
import { chatModels, rememberModel, rememberedModel } from "./models";
import { Message } from "./Message";
import { failureOf, modelOf, reasonOfChatError, textOf, titleFrom } from "./meta";

type SaveState = { kind: "idle" } | { kind: "saving" } | { kind: "saved" } | { kind: "failed"; reason: string };

function sameMessages(a: ReadonlyArray<{ id: string }>, b: ReadonlyArray<{ id: string }>): boolean {
  return a.length === b.length && a.every((message, index) => message.id === b[index]?.id);
}

/** One open session: the streaming chat, saving after each turn, hooks per turn. */
export function Conversation(props: {
  session: SessionOut;
  models: ModelsOut | undefined;
  model: string;
  onModelChange: (model: string) => void;
  onSaveDefault: (model: string) => Promise<void>;
  firstMessage?: string;
  onSaved: (session: SessionSummary) => void;
}) {
  const { session, model } = props;
  const modelRef = useRef(model);
  modelRef.current = model;

  // A chat reopens on the model it last used (this browser's record, else the newest answer's
  // model), when the catalog still offers it.
  const restored = useRef(false);
  const { onModelChange } = props;
  useEffect(() => {
    if (restored.current || !props.models) return;
    restored.current = true;
    const answered = [...session.messages].reverse().map((message) => modelOf(message as unknown as UIMessage)).find(Boolean);
    const last = rememberedModel(session.id) ?? answered ?? null;
    if (last && last !== modelRef.current && chatModels(props.models).includes(last)) onModelChange(last);
  }, [props.models, session.id, session.messages, onModelChange]);

  const revision = useRef(session.revision);
  const title = useRef(session.title);
  const saving = useRef<Promise<void>>(Promise.resolve());
  const [saveState, setSaveState] = useState<SaveState>({ kind: "idle" });
  const [conflict, setConflict] = useState<SessionOut | null>(null);

  const transport = useMemo(
    () =>
      new DefaultChatTransport<UIMessage>({
        api: "/api/chat",
        fetch: authedFetch,
        // Only the session, model, workspace and newest message: the server rebuilds history.
        prepareSendMessagesRequest: ({ id, messages }) => {
          const newest = messages[messages.length - 1];
          rememberModel(session.id, modelRef.current);
          const body: ChatTurnCreate = {
            id,
            model: modelRef.current || null,
            workspaceId: session.workspaceId,
            message: newest as unknown as ChatTurnCreate["message"],
          };
          return { body };
        },
      }),
    [session.id, session.workspaceId],
  );

  const persist = useCallback(
    (messages: UIMessage[]) => {
      saving.current = saving.current.then(async () => {
        setSaveState({ kind: "saving" });
        try {
          const result = await api.saveSession(session.id, {
            revision: revision.current,
            messages: messages as unknown as StoredMessage[],
            ...(title.current ? {} : { title: titleFrom(messages) }),
          });
          if (result.ok) {
            revision.current = result.session.revision;
            title.current = result.session.title;
            setSaveState({ kind: "saved" });
            props.onSaved(result.session);
            return;
          }
          const server = result.conflict.session;
          if (sameMessages(server.messages, messages)) {
            // The server recorded this turn itself (the same messages): save ours over it
            // once, so marks only this UI knows (a Stop) are kept too.
            const again = await api.saveSession(session.id, {
              revision: server.revision,
              messages: messages as unknown as StoredMessage[],
              ...(server.title ? {} : { title: titleFrom(messages) }),
            });
            const saved = again.ok ? again.session : again.conflict.session;
            revision.current = saved.revision;
            title.current = saved.title;
            setSaveState({ kind: "saved" });
            if (again.ok) props.onSaved(again.session);
            return;
          }
          setConflict(server);
          setSaveState({ kind: "failed", reason: "changed elsewhere" });
        } catch (error) {
          setSaveState({ kind: "failed", reason: messageOf(error) });
        }
      });
    },
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [session.id],
  );

  const lastError = useRef<string | null>(null);
  const setMessagesRef = useRef<(messages: UIMessage[]) => void>(() => undefined);
  const chat = useChat<UIMessage>({
    id: session.id,
    messages: session.messages as unknown as UIMessage[],
    transport,
    // A turn runs on when the page goes away: a reloaded page (or a second tab) follows it from
    // GET /api/chat/{id}/stream, which answers 204 when no turn runs. Not for a conversation opened
    // to send its first message: its own turn would be followed twice.
    resume: !props.firstMessage,
    onFinish: ({ message, messages, isAbort, isError }) => {
      // Keep how the turn ended with its message: a reopened session shows "stopped" or the reason.
      const ended = isAbort ? { stopped: true } : isError ? { failure: lastError.current ?? "the turn failed" } : null;
      if (ended && messages.some((item) => item.id === message.id && item.role === "assistant")) {
        const marked = messages.map((item) =>
          item.id === message.id ? { ...item, metadata: { ...(item.metadata as object | undefined), ...ended } } : item,
        );
        setMessagesRef.current(marked);
        persist(marked);
        return;
      }
      const last = messages[messages.length - 1];
      if (isError && !isAbort && last?.role === "user") {
        // Refused before it started (an unknown model, the gateway down): the question is
        // answered by a failure record, kept in the session, and Retry runs it again.
        const failed: UIMessage = { id: message.id, role: "assistant", parts: [], metadata: { failure: lastError.current ?? "the turn failed" } };
        const marked = [...messages, failed];
        setMessagesRef.current(marked);
        persist(marked);
        return;
      }
      persist(messages);
    },
    onError: (error) => {
      lastError.current = reasonOfChatError(error);
    },
  });
  const { messages, status, error, stop, sendMessage, setMessages, clearError, regenerate } = chat;
  setMessagesRef.current = setMessages;
  const [cancelling, setCancelling] = useState(false);
  const busy = status === "submitted" || status === "streaming" || cancelling;

  // Stop: the stream ends here at once, and the server cancels the turn (it would run on without
  // its client); the next message waits until it has.
  const stopTurn = useCallback(async () => {
    const last = messages[messages.length - 1];
    const turnId = last?.role === "assistant" ? (last.metadata as { turnId?: string } | undefined)?.turnId : undefined;
    setCancelling(true);
    try {
      await stop();
      // 409: the turn ended meanwhile (nothing to cancel).
      if (turnId) await api.cancelTurn(session.id, turnId).catch((error: unknown) => {
        if (!(error instanceof ApiError && error.status === 409)) setSaveState({ kind: "failed", reason: `Stop: ${messageOf(error)}` });
      });
    } finally {
      setCancelling(false);
    }
  }, [messages, stop, session.id]);

  const send = useCallback(
    (text: string) => {
      lastError.current = null;
      clearError();
      void sendMessage({ text });
    },
    [sendMessage, clearError],
  );

  // Retry and regenerate re-post the last user message with its id: the server replaces what
  // answered it, so the session keeps one copy of the question.
  const retry = useCallback(() => {
    lastError.current = null;
    clearError();
    void regenerate();
  }, [regenerate, clearError]);
  const edit = useCallback(
    (messageId: string, text: string) => {
      lastError.current = null;
      clearError();
      void sendMessage({ text, messageId });
    },
    [sendMessage, clearError],
  );

  const firstSent = useRef(false);
  useEffect(() => {
    if (props.firstMessage && !firstSent.current) {
      firstSent.current = true;
      send(props.firstMessage);
    }
  }, [props.firstMessage, send]);

  // Keep the newest text in view while it streams, unless the reader scrolled up.
  const scroller = useRef<HTMLDivElement>(null);
  const stick = useRef(true);
  useLayoutEffect(() => {
    const element = scroller.current;
    if (element && stick.current) element.scrollTop = element.scrollHeight;
  }, [messages, status]);

  const [timelineOpen, setTimelineOpen] = useState(false);
  const [runs, setRuns] = useState<HookRunOut[] | null>(null);
  const [runsError, setRunsError] = useState<string | null>(null);
  const loadRuns = useCallback(async () => {
    try {
      setRuns((await api.hooks(session.id)).runs);
      setRunsError(null);
    } catch (caught) {
      setRunsError(messageOf(caught));
    }
  }, [session.id]);
  useEffect(() => {
    if (timelineOpen) void loadRuns();
  }, [timelineOpen, loadRuns, status]);

  const loadServerCopy = () => {
    if (!conflict) return;
    setMessages(conflict.messages as unknown as UIMessage[]);
    revision.current = conflict.revision;
    title.current = conflict.title;
    setConflict(null);
    setSaveState({ kind: "saved" });
  };
  const overwrite = () => {
    if (!conflict) return;
    revision.current = conflict.revision;
    setConflict(null);
    persist(messages);
  };

  const newest = messages[messages.length - 1];
  // A failed turn shows its reason once: on its failure record when it has one, else here.
  const failureShown = newest?.role === "assistant" && (failureOf(newest) !== null || status === "error");
  return (
    <div className="conversation">
      <div className="chat-toolbar">
        <ModelPicker models={props.models} value={model} onChange={props.onModelChange} disabled={busy} />
        <span className="badge workspace-badge" data-testid="session-workspace" title="The repository this session's agents work in">
          workspace: {session.workspaceId}
        </span>
        <button
          type="button"
          className="ghost"
          aria-expanded={timelineOpen}
          aria-controls="hook-timeline"
          onClick={() => setTimelineOpen((open) => !open)}
        >
          Hook timeline
        </button>
      </div>
      <ModelNotice models={props.models} value={model} onSaveDefault={props.onSaveDefault} />
      {conflict ? (
        <div className="banner warn" role="alert" data-testid="revision-conflict">
          <p>
            This chat was changed somewhere else (server revision {conflict.revision}, {conflict.messages.length}{" "}
            messages). Your last turn was not saved.
          </p>
          <details>
            <summary>Show the server's copy</summary>
            <ol className="server-copy">
              {conflict.messages.map((message) => (
                <li key={message.id}>
                  <strong>{message.role}:</strong> {textOf(message) || "(no text)"}
                </li>
              ))}
            </ol>
          </details>
          <div className="banner-actions">
            <button type="button" onClick={loadServerCopy}>
              Load the server's copy
            </button>
            <button type="button" className="danger" onClick={overwrite}>
              Keep mine and overwrite
            </button>
          </div>
        </div>
      ) : null}
      <div className="chat-main">
        <div
          className="messages"
          ref={scroller}
          role="log"
          aria-label="Conversation"
          aria-busy={busy}
          onScroll={(event) => {
            const element = event.currentTarget;
            stick.current = element.scrollHeight - element.scrollTop - element.clientHeight < 80;
          }}
        >
          {messages.length === 0 ? <p className="empty muted">Ask popagent anything to start.</p> : null}
          {messages.map((message, index) => {
            const last = index === messages.length - 1;
            const lastUser = message.role === "user" && !messages.slice(index + 1).some((item) => item.role === "user");
            return (
              <Message
                key={message.id}
                message={message}
                sessionId={session.id}
                busy={busy}
                streaming={busy && last && message.role === "assistant"}
                {...(last && message.role === "assistant" ? { onRetry: retry } : {})}
                {...(lastUser ? { onEdit: (text: string) => edit(message.id, text) } : {})}
              />
            );
          })}
          {status === "submitted" ? (
            <p className="thinking muted" aria-live="polite">
              Waiting for popagent…
            </p>
          ) : null}
          {error && !failureShown ? (
            <div className="turn-error" role="alert" data-testid="chat-error">
              <p>
                <strong>The turn failed.</strong> <span data-testid="chat-error-reason">{reasonOfChatError(error)}</span>
              </p>
              <button type="button" className="primary small" onClick={retry} data-testid="retry">
                <Icon name="retry" /> Retry
              </button>
            </div>
          ) : null}
        </div>
        {timelineOpen ? (
          <aside id="hook-timeline" className="timeline-panel" aria-label="Hook timeline">
            <div className="panel-head">
              <h2>Hook timeline</h2>
              <button type="button" className="ghost small" onClick={() => void loadRuns()}>
                Refresh
              </button>
              <button type="button" className="ghost small" onClick={() => setTimelineOpen(false)}>
                Close
              </button>
            </div>
            {runsError ? <p className="error-text">{runsError}</p> : null}
            {runs ? <HookTimeline runs={runs} /> : <p className="muted">Loading…</p>}
          </aside>
        ) : null}
      </div>
      <div className="status-row" aria-live="polite">
        <span data-testid="chat-status" data-status={status}>
          {status === "streaming" ? "popagent is answering…" : status === "submitted" ? "sending…" : ""}
        </span>
        <span data-testid="save-state" data-state={saveState.kind} className={saveState.kind === "failed" ? "error-text" : "muted"}>
          {saveState.kind === "saving" ? "saving…" : saveState.kind === "saved" ? "saved" : saveState.kind === "failed" ? `not saved: ${saveState.reason}` : ""}
        </span>
      </div>
      <Composer busy={busy} onSend={send} onStop={() => void stopTurn()} />
    </div>
  );
}

