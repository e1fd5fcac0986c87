import { useId, useState, type FormEvent } from "react";
import { api } from "../api/client";
import type { MemoryOut } from "../api/types";
import { useConfirm } from "../common/confirm";
import { Field, SubmitStatus, fieldsOf, useSubmit } from "../common/forms";
import { messageOf, useLoad } from "../common/useLoad";

function stamp(iso: string): string {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

/** Long-term memories: facts and preferences recalled into every turn, kept across sessions. */
export function Memories() {
  const [search, setSearch] = useState("");
  const [query, setQuery] = useState("");
  const list = useLoad(["memories", query], () => api.memories(query || undefined));
  const [dialog, confirm] = useConfirm();
  const [error, setError] = useState<string | null>(null);
  const searchId = useId();

  const remove = async (memory: MemoryOut) => {
    const yes = await confirm({
      title: "Forget this memory?",
      message: <p>“{memory.content}” is deleted for good and no longer recalled.</p>,
      confirmLabel: "Forget",
      danger: true,
    });
    if (!yes) return;
    setError(null);
    try {
      await api.deleteMemory(memory.id);
    } catch (caught) {
      setError(`Could not forget it: ${messageOf(caught)}`);
    }
    await list.reload();
  };

  return (
    <div className="stack">
      <h2>Long-term memories</h2>
      <p className="muted">
        Facts and preferences popagent recalls in every chat. The agent adds them with its remember tool; you can add, correct or
        forget them here.
      </p>
      <NewMemory onCreated={() => void list.reload()} />
      <form
        className="search-row"
        role="search"
        onSubmit={(event) => {
          event.preventDefault();
          setQuery(search.trim());
        }}
      >
        <label htmlFor={searchId} className="visually-hidden">
          Search memories
        </label>
        <input id={searchId} type="search" placeholder="Search memories" value={search} onChange={(event) => setSearch(event.target.value)} />
        <button type="submit">Search</button>
      </form>
      {error ? (
        <p role="alert" className="error-text">
          {error}
        </p>
      ) : null}
      {list.error ? (
        <p role="alert" className="error-text">
          Could not load memories: {list.error.message}
        </p>
      ) : null}
      <ul className="task-list" data-testid="memory-list">
        {list.data?.memories.length === 0 ? <li className="muted">{query ? "No memory matches." : "No memories yet."}</li> : null}
        {list.data?.memories.map((memory) => (
          <MemoryItem key={`${memory.id}-${memory.updatedAt}`} memory={memory} onSaved={() => void list.reload()} onDelete={() => void remove(memory)} />
        ))}
      </ul>
      {dialog}
    </div>
  );
}

function NewMemory(props: { onCreated: () => void }) {
  const formId = useId().replace(/:/g, "");
  const [content, setContent] = useState("");
  const submit = useSubmit(["content"]);
  const spec = fieldsOf("MemoryCreate").content ?? { type: "string" };
  const onSubmit = async (event: FormEvent) => {
    event.preventDefault();
    const created = await submit.run(() => api.createMemory({ content }));
    if (created !== undefined) {
      setContent("");
      props.onCreated();
    }
  };
  return (
    <form className="settings-form card" noValidate onSubmit={(event) => void onSubmit(event)} data-form="MemoryCreate">
      <Field formId={formId} name="content" spec={spec} label="New memory" error={submit.errors.content} value={content} onChange={(value) => setContent(String(value))} />
      <div className="form-actions">
        <button type="submit" className="primary">
          Remember
        </button>
        <SubmitStatus state={submit.state} />
      </div>
    </form>
  );
}

function MemoryItem(props: { memory: MemoryOut; onSaved: () => void; onDelete: () => void }) {
  const { memory } = props;
  const formId = useId().replace(/:/g, "");
  const [editing, setEditing] = useState(false);
  const [content, setContent] = useState(memory.content);
  const submit = useSubmit(["content"]);
  const spec = fieldsOf("MemoryPatch").content ?? { type: "string" };
  const onSubmit = async (event: FormEvent) => {
    event.preventDefault();
    const saved = await submit.run(() => api.patchMemory(memory.id, { content }));
    if (saved !== undefined) props.onSaved();
  };
  return (
    <li className="card task" data-testid="memory-item" data-memory-id={memory.id}>
      {editing ? (
        <form noValidate onSubmit={(event) => void onSubmit(event)} className="settings-form">
          <Field formId={formId} name="content" spec={spec} label="Memory" error={submit.errors.content} value={content} onChange={(value) => setContent(String(value))} />
          <div className="form-actions">
            <button type="submit" className="primary small">
              Save
            </button>
            <button type="button" className="ghost small" onClick={() => setEditing(false)}>
              Cancel
            </button>
            <SubmitStatus state={submit.state} />
          </div>
        </form>
      ) : (
        <p className="memory-content">{memory.content}</p>
      )}
      <div className="task-meta muted">
        <span>{memory.source === "agent" ? "written by the agent" : "added by you"}</span>
        <span>changed {stamp(memory.updatedAt)}</span>
        {memory.sessionId ? <a href={`#/chat/${encodeURIComponent(memory.sessionId)}`}>from a chat</a> : null}
      </div>
      {editing ? null : (
        <div className="task-actions">
          <button type="button" className="small" onClick={() => setEditing(true)}>
            Edit
          </button>
          <button type="button" className="small danger" onClick={props.onDelete}>
            Forget
          </button>
        </div>
      )}
    </li>
  );
}
