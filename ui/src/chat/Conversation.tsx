import { ExportMenu } from "./ExportMenu";
import { useChat } from "@ai-sdk/react";
import { generateId, lastAssistantMessageIsCompleteWithApprovalResponses, type FileUIPart, type UIMessage } from "ai";
import { useCallback, useEffect, useLayoutEffect, useMemo, useRef, useState } from "react";
import { authedFetch } from "../api/auth";
import { ApprovalSession } from "../approvals/ApprovalCard";
import { SessionGrants } from "../approvals/Grants";
import { notifyApproval } from "../approvals/notify";
import { useRefreshApprovals } from "../approvals/pending";
import { api, ApiError } from "../api/client";
import type { ChatTurnCreate, HookRunOut, ModelsOut, SessionOut, SessionSummary, StoredMessage } from "../api/types";
import { Icon } from "../common/Icon";
import { messageOf } from "../common/useLoad";
import type { FirstMessage } from "./attachments";
import { Composer } from "./Composer";
import {
  AdoptingTransport,
  DoubleTextingPicker,
  QueuedTurns,
  fromServer,
  readUntilStart,
  type DoubleTexting,
  type QueuedTurn,
} from "./doubleTexting";
import { HookTimeline } from "./HookTimeline";
import { ModelNotice, ModelPicker, type ModelFix } from "./ModelPicker";
import { chatModels, rememberModel, rememberedModel } from "./models";
import { Message } from "./Message";
import { failureOf, interruptedOf, modelOf, reasonOfChatError, titleFrom } from "./meta";

type SaveState = { kind: "idle" } | { kind: "saving" } | { kind: "saved" } | { kind: "failed"; reason: string };

/** The server's copy of the session once it holds how the turn answering with `messageId` ended: a
 * running turn's answer is stored first as a placeholder marked `interrupted`, replaced when the turn
 * ends (a stream's end can reach the page just before that). After 10 s, whatever the server holds. */
async function settledCopy(sessionId: string, messageId: string | null): Promise<SessionOut> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const server = await api.session(sessionId);
    const answer = messageId === null ? undefined : server.messages.find((message) => message.id === messageId);
    const placeholder = (answer?.metadata as { interrupted?: unknown } | null | undefined)?.interrupted === true;
    if (!placeholder || Date.now() > deadline) return server;
    await new Promise((resolve) => window.setTimeout(resolve, 250));
  }
}

function asksApproval(message: UIMessage): boolean {
  return message.parts.some((part) => (part as { state?: string }).state === "approval-requested");
}

/** The queued turns as the server lists them, keeping this page's own (it reads their streams), the
 * ones it sent that the server has not listed yet last. */
function mergeQueued(current: QueuedTurn[], server: SessionOut["queuedTurns"]): QueuedTurn[] {
  const own = new Map(current.filter((turn) => turn.own).map((turn) => [turn.message.id, turn]));
  const listed = fromServer(server).map((turn) => {
    const mine = own.get(turn.message.id);
    return mine ? { ...mine, turnId: mine.turnId ?? turn.turnId } : turn;
  });
  const ids = new Set(listed.map((turn) => turn.message.id));
  return [...listed, ...current.filter((turn) => turn.own && !ids.has(turn.message.id))];
}

/** One open session: the streaming chat, saving after each turn, hooks per turn. */
export function Conversation(props: {
  session: SessionOut;
  models: ModelsOut | undefined;
  model: string;
  onModelChange: (model: string) => void;
  onFixModels: (fix: ModelFix) => Promise<void>;
  firstMessage?: FirstMessage;
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

  const saving = useRef<Promise<void>>(Promise.resolve());
  const [saveState, setSaveState] = useState<SaveState>({ kind: "idle" });
  const [title, setTitle] = useState(session.title);
  // An archived chat says so (it is listed under Archived only), with Restore.
  const [archived, setArchived] = useState(session.archived);
  const [restoreError, setRestoreError] = useState<string | null>(null);
  const restore = async () => {
    setRestoreError(null);
    try {
      const saved = await api.patchSession(session.id, { archived: false });
      setArchived(saved.archived);
      props.onSaved(saved);
    } catch (caught) {
      setRestoreError(messageOf(caught));
    }
  };

  const transport = useMemo(
    () =>
      new AdoptingTransport({
        api: "/api/chat",
        fetch: authedFetch,
        // Only the session, model, workspace and newest message: the server rebuilds history. A
        // message sent while a turn runs names the policy it was sent under (`doubleTexting`).
        prepareSendMessagesRequest: ({ id, messages, body: extra }) => {
          const newest = messages[messages.length - 1];
          rememberModel(session.id, modelRef.current);
          const doubleTexting = (extra as { doubleTexting?: DoubleTexting } | undefined)?.doubleTexting;
          const body: ChatTurnCreate = {
            id,
            model: modelRef.current || null,
            workspaceId: session.workspaceId,
            message: newest as unknown as ChatTurnCreate["message"],
            ...(doubleTexting ? { doubleTexting } : {}),
          };
          return { body };
        },
      }),
    [session.id, session.workspaceId],
  );

  // The server stores every turn itself (docs/turns.md): after one, this page shows the server's
  // copy and writes nothing back, so another tab's turns and changes show here and nothing the
  // server stored is written over. It saves only what the server cannot know: a title for an
  // untitled chat, and the failure record of a turn refused before it started.
  const adopt = useCallback(
    (server: SessionOut) => {
      setArchived(server.archived);
      setTitle(server.title);
      setVersions(server.messageVersions);
      setQueued((current) => mergeQueued(current, server.queuedTurns));
      props.onSaved(server);
    },
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [session.id],
  );

  /** The server's copy with `extra` after it (messages only this page has, not stored yet), and a
   * title from its first message when it has none. On a copy stored meanwhile (a turn of another
   * tab's), once more. */
  const save = useCallback(
    async (server: SessionOut, extra: UIMessage[]): Promise<SessionOut> => {
      for (let attempt = 0; attempt < 2; attempt += 1) {
        const stored = new Set(server.messages.map((message) => message.id));
        const missing = extra.filter((message) => !stored.has(message.id));
        const messages = [...(server.messages as unknown as UIMessage[]), ...missing];
        const title = server.title ? "" : titleFrom(messages);
        if (!missing.length && !title) return server;
        const result = await api.saveSession(session.id, {
          revision: server.revision,
          messages: messages as unknown as StoredMessage[],
          ...(title ? { title } : {}),
        });
        if (result.ok) return { ...server, ...result.session, messages: messages as unknown as StoredMessage[] };
        server = result.conflict.session;
      }
      return server;
    },
    [session.id],
  );

  /** After a turn: the server's copy once it holds the turn's end (`show`: in place of this page's;
   * else only read, to say it is saved), with a title when the chat has none. */
  const reconcile = useCallback(
    (messageId: string | null, show: boolean, extra: UIMessage[] = []) => {
      const done = saving.current.then(async () => {
        setSaveState({ kind: "saving" });
        try {
          const server = await save(await settledCopy(session.id, messageId), extra);
          const idle = statusRef.current !== "submitted" && statusRef.current !== "streaming";
          // Not over a turn this page started since, nor before its own queued turns are handed over.
          if (show && idle && !queuedRef.current.some((turn) => turn.own)) {
            setMessagesRef.current(server.messages as unknown as UIMessage[]);
          }
          adopt(server);
          setSaveState({ kind: "saved" });
        } catch (error) {
          setSaveState({ kind: "failed", reason: messageOf(error) });
        }
      });
      saving.current = done;
      return done;
    },
    [session.id, save, adopt],
  );

  const [policy, setPolicy] = useState<DoubleTexting>(session.doubleTexting);
  const [policySaving, setPolicySaving] = useState(false);
  const [policyError, setPolicyError] = useState<string | null>(null);
  const [queued, setQueued] = useState<QueuedTurn[]>(() => fromServer(session.queuedTurns));
  const queuedRef = useRef(queued);
  queuedRef.current = queued;
  const [queueError, setQueueError] = useState<string | null>(null);
  // useChat's own turn waits behind others (its stream began with `data-turnQueued`): how many.
  const [waitingAhead, setWaitingAhead] = useState<number | null>(null);
  const waitingTurnId = useRef<string | null>(null);
  // Set while the running turn's stream is stopped here for a message that interrupts it.
  const handover = useRef<DoubleTexting | null>(null);

  const finishes = useRef(0);
  const lastError = useRef<string | null>(null);
  // The versions of edited user messages (< 2/3 >), as the server keeps them; read again after each turn.
  const [versions, setVersions] = useState(() => session.messageVersions);
  const [versionError, setVersionError] = useState<string | null>(null);
  const setMessagesRef = useRef<(messages: UIMessage[]) => void>(() => undefined);
  const statusRef = useRef<string>("ready");
  // Set while this page asks the resume route whether a turn runs: the placeholder answer a running
  // turn stored (marked `interrupted`) shows as an answer being written, not as an interrupted one.
  const [following, setFollowing] = useState(!props.firstMessage);
  const followRef = useRef<(skip?: string) => Promise<void>>(async () => undefined);
  const chat = useChat<UIMessage>({
    id: session.id,
    messages: session.messages as unknown as UIMessage[],
    transport,
    // A turn runs on when the page goes away: a reloaded page (or a second tab) follows it from
    // GET /api/chat/{id}/stream, which answers 204 when no turn runs (`follow`, below, on opening).
    // A stream the server ended while a tool call waits for a person (its finish marks
    // `awaitingApproval`) goes on once every request of the step is answered: the assistant message
    // with its answers is posted back, and the server streams the rest of the turn (docs/approvals.md).
    // A stream that stays open while the turn waits is not affected: this only runs when idle.
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onData: (part) => {
      if (part.type !== "data-turnQueued") return;
      const data = part.data as { ahead?: unknown; turnId?: unknown } | undefined;
      waitingTurnId.current = typeof data?.turnId === "string" ? data.turnId : null;
      setWaitingAhead(typeof data?.ahead === "number" ? data.ahead : 0);
    },
    onFinish: ({ message, messages, isAbort, isError }) => {
      finishes.current += 1;
      if (handover.current && isAbort) {
        // Stopped here for a message that interrupts the turn: the server cancels it and keeps
        // (interrupt, marked cancelled) or drops (rollback) what it said; the next turn's end shows which.
        if (handover.current === "interrupt" && messages.some((item) => item.id === message.id && item.role === "assistant")) {
          setMessagesRef.current(
            messages.map((item) =>
              item.id === message.id ? { ...item, metadata: { ...(item.metadata as object | undefined), cancelled: true } } : item,
            ),
          );
        }
        return;
      }
      const answered = messages.some((item) => item.id === message.id && item.role === "assistant");
      if (isAbort) {
        // Stopped by the user: the text stays as it stopped here (the server stores it marked
        // cancelled once the cancel reaches it); the server's copy is only read.
        if (answered) {
          setMessagesRef.current(
            messages.map((item) => (item.id === message.id ? { ...item, metadata: { ...(item.metadata as object | undefined), stopped: true } } : item)),
          );
        }
        void reconcile(answered ? message.id : null, false);
        return;
      }
      const last = messages[messages.length - 1];
      if (isError && last?.role === "user") {
        // Refused before it started (an unknown model, the gateway down): the server stored nothing.
        // The question is answered by a failure record, kept in the session, and Retry runs it again.
        const failed: UIMessage = { id: message.id, role: "assistant", parts: [], metadata: { failure: lastError.current ?? "the turn failed" } };
        setMessagesRef.current([...messages, failed]);
        void reconcile(null, false, [last, failed]);
        return;
      }
      if (answered && asksApproval(message)) {
        // The turn waits for a person: this copy goes on with the answers (sendAutomaticallyWhen).
        void reconcile(message.id, false);
        return;
      }
      // Then whatever runs on the session now (a turn another tab queued behind this one).
      void reconcile(answered ? message.id : null, true).then(() => followRef.current(answered ? message.id : undefined));
    },
    onError: (error) => {
      lastError.current = reasonOfChatError(error);
    },
  });
  const { messages, status, error, stop, sendMessage, setMessages, clearError, regenerate, resumeStream, addToolApprovalResponse } = chat;
  const approvalChat = useMemo(
    () => ({
      sessionId: session.id,
      respond: (approvalId: string, approved: boolean, reason?: string) => {
        lastError.current = null;
        void addToolApprovalResponse({ id: approvalId, approved, ...(reason ? { reason } : {}) });
      },
    }),
    [session.id, addToolApprovalResponse],
  );
  setMessagesRef.current = setMessages;
  statusRef.current = status;
  const [cancelling, setCancelling] = useState(false);
  const busy = status === "submitted" || status === "streaming" || cancelling;

  // Follow the turn running on the session, if any (another tab's, or one that ran on while this page
  // was away): the resume route from its first chunk. Asked first, so useChat (whose resume sets the
  // chat ready when nothing runs) is involved only when a turn runs and this page sends nothing; not
  // while this page has its own queued turns waiting: their streams are this page's already.
  const follow = useCallback(
    async (skip?: string) => {
      if (queuedRef.current.some((turn) => turn.own)) return;
      setFollowing(true);
      try {
        const stream = await transport.running(session.id, skip ?? null);
        if (!stream) return;
        const idle = statusRef.current !== "submitted" && statusRef.current !== "streaming";
        if (!idle || queuedRef.current.some((turn) => turn.own)) {
          await stream.cancel().catch(() => undefined);
          return;
        }
        transport.handOver(stream);
        await resumeStream();
      } catch {
        // The resume route failed: nothing is followed; the chat shows what the server stored.
      } finally {
        setFollowing(false);
      }
    },
    [transport, session.id, resumeStream],
  );
  followRef.current = follow;
  // On opening; not for a conversation opened to send its first message (its own turn).
  const opened = useRef(false);
  useEffect(() => {
    if (opened.current || props.firstMessage) return;
    opened.current = true;
    void follow();
  }, [follow, props.firstMessage]);

  useEffect(() => {
    if (status === "submitted") return;
    setWaitingAhead(null);
    waitingTurnId.current = null;
  }, [status]);

  // useChat reads one stream at a time: a queued turn's stream waits for it to be idle.
  const idleWaiters = useRef<Array<() => void>>([]);
  useEffect(() => {
    if (status !== "submitted" && status !== "streaming") for (const wake of idleWaiters.current.splice(0)) wake();
  }, [status]);
  const idle = useCallback(
    () =>
      statusRef.current === "submitted" || statusRef.current === "streaming"
        ? new Promise<void>((resolve) => idleWaiters.current.push(resolve))
        : Promise.resolve(),
    [],
  );
  const handoffs = useRef<Promise<void>>(Promise.resolve());
  const ownStreams = useRef(new Set<AbortController>());
  useEffect(() => {
    const streams = ownStreams.current;
    return () => {
      for (const controller of streams) controller.abort();
    };
  }, []);

  // Stop: the stream ends here at once, and the server cancels the turn (it would run on without
  // its client); the next message waits until it has.
  const stopTurn = useCallback(async () => {
    const last = messages[messages.length - 1];
    // The answering turn's, or the one this chat's message waits as (queued behind others).
    const turnId =
      status === "submitted"
        ? (waitingTurnId.current ?? undefined)
        : last?.role === "assistant"
          ? (last.metadata as { turnId?: string } | undefined)?.turnId
          : undefined;
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
  }, [messages, stop, session.id, status]);

  const changePolicy = useCallback(
    async (next: DoubleTexting) => {
      const before = policy;
      setPolicy(next);
      setPolicySaving(true);
      setPolicyError(null);
      try {
        const saved = await api.patchSession(session.id, { doubleTexting: next });
        setPolicy(saved.doubleTexting);
        props.onSaved(saved);
      } catch (caught) {
        setPolicy(before);
        setPolicyError(messageOf(caught));
      } finally {
        setPolicySaving(false);
      }
    },
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [policy, session.id],
  );

  const dropQueued = useCallback((messageId: string) => {
    setQueued((current) => current.filter((turn) => turn.message.id !== messageId));
  }, []);

  // A message sent to wait in the queue. useChat cannot take a second request while its stream runs
  // (sendMessage would start a second stream writing into the same messages), so the queued turn is
  // posted with the same transport but read here: its `data-turnQueued` chunks feed the queued
  // bubble, and once the turn starts (its `start` chunk) the rest of that same stream is handed to
  // useChat through `sendMessage` of the message (AdoptingTransport), after the running turn ended.
  const enqueue = useCallback(
    async (text: string) => {
      const message: UIMessage = { id: generateId(), role: "user", parts: [{ type: "text", text }] };
      const controller = new AbortController();
      ownStreams.current.add(controller);
      setQueued((current) => [...current, { message, turnId: null, ahead: null, own: true }]);
      setQueueError(null);
      try {
        const stream = await transport.sendMessages({
          chatId: session.id,
          messages: [message],
          abortSignal: controller.signal,
          trigger: "submit-message",
          messageId: undefined,
          body: { doubleTexting: "enqueue" },
        });
        const outcome = await readUntilStart(
          stream,
          (turnId, ahead) =>
            setQueued((current) => current.map((turn) => (turn.message.id === message.id ? { ...turn, turnId, ahead } : turn))),
          () => controller.abort(),
        );
        if (outcome.kind === "ended") {
          dropQueued(message.id);
          if (outcome.reason === "failed") setQueueError(`The queued message failed: ${outcome.text}`);
          return;
        }
        handoffs.current = handoffs.current.then(async () => {
          await idle();
          dropQueued(message.id);
          transport.adopt(message.id, outcome.stream);
          lastError.current = null;
          await sendMessage({ id: message.id, role: "user", parts: message.parts });
        });
      } catch (caught) {
        dropQueued(message.id);
        if (!controller.signal.aborted) setQueueError(`Not queued: ${reasonOfChatError(caught instanceof Error ? caught : new Error(String(caught)))}`);
      } finally {
        ownStreams.current.delete(controller);
      }
    },
    [transport, session.id, dropQueued, idle, sendMessage],
  );

  // A message that interrupts (or rolls back) the running turn: useChat's stream of that turn is
  // stopped here, without cancelling it, and the new message is sent under the same policy: the
  // server cancels the running turn itself when the new one starts.
  const interruptWith = useCallback(
    async (text: string, how: "interrupt" | "rollback") => {
      handover.current = how;
      try {
        await stop();
      } finally {
        handover.current = null;
      }
      if (how === "rollback") {
        // The server drops the running turn's prompt and answer; so does this copy.
        setMessages((current) => {
          const at = current.findLastIndex((item) => item.role === "user");
          return at === -1 ? current : current.slice(0, at);
        });
      }
      void sendMessage({ text }, { body: { doubleTexting: how } });
    },
    [stop, setMessages, sendMessage],
  );

  // Keep the newest text in view while it streams, unless the reader scrolled up.
  const scroller = useRef<HTMLDivElement>(null);
  const stick = useRef(true);

  const send = useCallback(
    (text: string, files: FileUIPart[] = []) => {
      // Sending brings the conversation's end into view, wherever the reader had scrolled to.
      stick.current = true;
      lastError.current = null;
      clearError();
      // Behind this page's own queued messages too, so they keep their order.
      if (policy === "enqueue" && (busy || queuedRef.current.some((turn) => turn.own))) void enqueue(text);
      else if (busy && (policy === "interrupt" || policy === "rollback")) void interruptWith(text, policy);
      else if (files.length) void sendMessage(text ? { text, files } : { files });
      else void sendMessage({ text });
    },
    [sendMessage, clearError, busy, policy, enqueue, interruptWith],
  );

  const cancelQueued = useCallback(
    async (turn: QueuedTurn) => {
      if (!turn.turnId) return;
      setQueued((current) => current.map((item) => (item.message.id === turn.message.id ? { ...item, cancelling: true } : item)));
      try {
        await api.cancelTurn(session.id, turn.turnId);
        // This page's own queued turn leaves when its stream ends (an `abort` chunk).
        if (!turn.own) dropQueued(turn.message.id);
      } catch (caught) {
        setQueued((current) => current.map((item) => (item.message.id === turn.message.id ? { ...item, cancelling: false } : item)));
        if (caught instanceof ApiError && (caught.status === 409 || caught.status === 404)) {
          // It started or ended meanwhile: the server's list says what still waits.
          const server = await api.session(session.id).catch(() => null);
          if (server) setQueued((current) => mergeQueued(current, server.queuedTurns));
        } else {
          setQueueError(`Cancel: ${messageOf(caught)}`);
        }
      }
    },
    [session.id, dropQueued],
  );

  // Queued turns this page did not send (listed by the server on opening it, or another tab's):
  // while the chat is idle the session is read again, and when one of them has started, the chat
  // shows the server's copy and follows the running turn (the resume route).
  const foreignQueued = queued.some((turn) => !turn.own);
  useEffect(() => {
    if (!foreignQueued || busy) return;
    let live = true;
    const timer = window.setInterval(() => {
      void api
        .session(session.id)
        .then((server) => {
          if (!live) return;
          const waiting = new Set(server.queuedTurns.map((turn) => turn.message.id));
          const left = queuedRef.current.some((turn) => !turn.own && !waiting.has(turn.message.id));
          setQueued((current) => mergeQueued(current, server.queuedTurns));
          if (left) {
            setMessagesRef.current(server.messages as unknown as UIMessage[]);
            const before = finishes.current;
            // Nothing to follow (it ended already, or was cancelled): the server's copy has how it ended.
            void follow().then(() => (finishes.current === before ? reconcile(null, true) : undefined));
          }
        })
        .catch(() => undefined);
    }, 1500);
    return () => {
      live = false;
      window.clearInterval(timer);
    };
  }, [foreignQueued, busy, session.id, follow, reconcile]);

  // Retry and regenerate re-post the last user message with its id: the server replaces what
  // answered it, so the session keeps one copy of the question.
  const retry = useCallback(() => {
    lastError.current = null;
    clearError();
    void regenerate();
  }, [regenerate, clearError]);
  // An edit of any user message re-posts it with its id and new text: the server keeps the branch it
  // leaves as a version of that message, and the chat goes on from the edit.
  const edit = useCallback(
    (messageId: string, text: string) => {
      lastError.current = null;
      clearError();
      void sendMessage({ text, messageId });
    },
    [sendMessage, clearError],
  );
  const showVersion = useCallback(
    async (messageId: string, version: number) => {
      setVersionError(null);
      try {
        const server = await api.showMessageVersion(session.id, messageId, version);
        setMessagesRef.current(server.messages as unknown as UIMessage[]);
        setVersions(server.messageVersions);
        props.onSaved(server);
      } catch (caught) {
        setVersionError(`Versions: ${messageOf(caught)}`);
      }
    },
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [session.id],
  );
  const versionsOf = useMemo(() => new Map(versions.map((entry) => [entry.messageId, entry])), [versions]);

  const attachTo = useCallback(async () => session.id, [session.id]);

  const firstSent = useRef(false);
  useEffect(() => {
    if (props.firstMessage && !firstSent.current) {
      firstSent.current = true;
      send(props.firstMessage.text, props.firstMessage.files);
    }
  }, [props.firstMessage, send]);

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

  // A new approval request in the stream (live or followed after a reload): the sidebar's badge
  // and the cards reload at once, and a hidden tab shows a notification when it may.
  const refreshApprovals = useRefreshApprovals();
  const seenApprovals = useRef<Set<string> | null>(null);
  useEffect(() => {
    const asking = messages.flatMap((message) =>
      message.parts.flatMap((part) => {
        const approval = (part as { state?: string; approval?: { id?: string } }).approval;
        if ((part as { state?: string }).state !== "approval-requested" || !approval?.id) return [];
        const name = part.type === "dynamic-tool" ? (part as { toolName: string }).toolName : part.type.replace(/^tool-/, "");
        return [{ id: approval.id, name }];
      }),
    );
    const first = seenApprovals.current === null;
    const seen = seenApprovals.current ?? new Set<string>();
    seenApprovals.current = seen;
    const fresh = asking.filter((item) => !seen.has(item.id));
    for (const item of fresh) seen.add(item.id);
    if (!fresh.length) return;
    refreshApprovals();
    // Not for what the page opened with: only a request that arrives while it is open.
    if (!first) for (const item of fresh) notifyApproval(item.name);
  }, [messages, refreshApprovals]);

  const newest = messages[messages.length - 1];
  // A failed turn shows its reason once: on its failure record when it has one, else here.
  const failureShown = newest?.role === "assistant" && (failureOf(newest) !== null || status === "error");
  return (
    <ApprovalSession.Provider value={approvalChat}>
    <div className="conversation">
      <h1 className="visually-hidden" data-testid="chat-title">
        {title || titleFrom(messages) || "Untitled chat"}
      </h1>
      <div className="chat-toolbar">
        <ModelPicker models={props.models} value={model} onChange={props.onModelChange} disabled={busy} />
        <DoubleTextingPicker value={policy} saving={policySaving} error={policyError} onChange={(next) => void changePolicy(next)} />
        <SessionGrants sessionId={session.id} />
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
        <ExportMenu sessionId={session.id} />
      </div>
      <ModelNotice models={props.models} value={model} onFix={props.onFixModels} />
      {archived ? (
        <div className="banner warn" role="status" data-testid="archived-notice">
          <p>This chat is archived: it is listed under Archived, not with the active chats. It can still be read and continued.</p>
          <div className="banner-actions">
            <button type="button" onClick={() => void restore()}>
              Restore
            </button>
          </div>
          {restoreError ? <p className="error-text">Restore: {restoreError}</p> : null}
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
            const shown = message.role === "user" ? versionsOf.get(message.id) : undefined;
            return (
              <Message
                key={message.id}
                message={message}
                sessionId={session.id}
                busy={busy}
                streaming={last && message.role === "assistant" && (busy || (following && interruptedOf(message)))}
                {...(last && message.role === "assistant" ? { onRetry: retry } : {})}
                {...(message.role === "user" ? { onEdit: (text: string) => edit(message.id, text) } : {})}
                {...(shown
                  ? { versions: { shown: shown.shown, count: shown.versions, onShow: (n: number) => void showVersion(message.id, n) } }
                  : {})}
              />
            );
          })}
          {status === "submitted" ? (
            <p className="thinking muted" aria-live="polite">
              {waitingAhead === null
                ? "Waiting for popagent…"
                : `Queued: waiting for ${waitingAhead} ${waitingAhead === 1 ? "turn" : "turns"} to end…`}
            </p>
          ) : null}
          <QueuedTurns turns={queued} onCancel={(turn) => void cancelQueued(turn)} />
          {versionError ? (
            <p className="error-text" role="alert" data-testid="version-error">
              {versionError}
            </p>
          ) : null}
          {queueError ? (
            <p className="error-text" role="alert" data-testid="queue-error">
              {queueError}
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
      <Composer
        busy={busy}
        sendWhileBusy={policy !== "reject"}
        onSend={send}
        onStop={() => void stopTurn()}
        attachTo={attachTo}
      />
    </div>
    </ApprovalSession.Provider>
  );
}

