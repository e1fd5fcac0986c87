// A session's observational memory: its observation log (as the model receives it), the last
// compaction and how many tokens the log saves each request. Every memory setting is explained
// on the settings page (Memory compaction), from the API's one-line descriptions.
import { api } from "../api/client";
import { useLoad } from "../common/useLoad";
import { href } from "../route";

export default function SessionMemoryPage({ sessionId }: { sessionId: string }) {
  return sessionId ? <SessionMemory sessionId={sessionId} /> : <ChooseSession />;
}

/** No session in the address: the recent chats, each linking to its memory view. */
function ChooseSession() {
  const sessions = useLoad(["sessions", false, ""], () => api.sessions(false));
  return (
    <section className="page session-memory" aria-labelledby="session-memory-title">
      <h1 id="session-memory-title">Conversation memory</h1>
      <p className="muted">Choose a chat to see what its memory keeps of it.</p>
      {sessions.error ? <p role="alert">The chats could not be loaded: {sessions.error.message}</p> : null}
      <ul>
        {(sessions.data?.sessions ?? []).map((session) => (
          <li key={session.id}>
            <a href={`#/memory/${encodeURIComponent(session.id)}`}>{session.title || session.id}</a>
          </li>
        ))}
      </ul>
    </section>
  );
}

function SessionMemory({ sessionId }: { sessionId: string }) {
  const memory = useLoad(["session-memory", sessionId], () => api.sessionMemory(sessionId), { fresh: true });
  const view = memory.data;
  return (
    <section className="page session-memory" aria-labelledby="session-memory-title">
      <h1 id="session-memory-title">Conversation memory</h1>
      <p className="muted">
        Older messages of a long conversation are sent to the model as dated observations; the messages themselves stay
        stored. <a href={href({ page: "chat", sessionId })}>Back to the chat</a> ·{" "}
        <a href={href({ page: "settings", section: "memory" })}>Memory settings</a>
      </p>
      {memory.error ? <p role="alert">The memory of this conversation could not be loaded: {memory.error.message}</p> : null}
      {view ? (
        <>
          <dl className="memory-figures">
            <dt>Last compaction</dt>
            <dd>{view.lastCompactionAt ? new Date(view.lastCompactionAt).toLocaleString() : "none yet"}</dd>
            <dt>Tokens saved per request</dt>
            <dd>
              {view.tokensSaved.toLocaleString()} ({view.observedMessageTokens.toLocaleString()} tokens of messages kept
              as {view.observationTokens.toLocaleString()} tokens of observations)
            </dd>
            <dt>Messages still sent as they are</dt>
            <dd>
              {view.rawMessages} ({view.rawTokens.toLocaleString()} tokens)
            </dd>
            <dt>Log version</dt>
            <dd>{view.generation}</dd>
          </dl>
          <h2>Observation log</h2>
          {view.entries.length === 0 ? <p className="muted">Nothing observed yet: the conversation is still short.</p> : null}
          <ol className="observation-log">
            {view.entries.map((entry, index) => (
              <li key={index}>
                <p className="muted">
                  {entry.kind === "reflection" ? "Condensed log" : "Observation"} · {new Date(entry.createdAt).toLocaleString()} ·{" "}
                  {entry.tokens} tokens for {entry.messageTokens} tokens of messages{entry.active ? "" : " · buffered, not yet in the context"}
                </p>
                <pre>{entry.content}</pre>
              </li>
            ))}
          </ol>
        </>
      ) : null}
    </section>
  );
}
