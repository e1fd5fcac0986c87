// Long-term memories (popagent_memories), listed under Settings: add, correct, re-kind, pin and forget.
import { useId, useState, type FormEvent } from "react";
import { api } from "../api/client";
import type { MemoryOut, MemoryPatch } from "../api/types";
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
        Facts and preferences popagent recalls in every chat. The agent adds them with its remember tool; you can add, correct,
        re-kind, pin or forget them here. The agent never changes a pinned memory, and it never ages out.
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

type Kind = MemoryOut["kind"];

const KIND_LABELS: Record<Kind, string> = { fact: "Fact", preference: "Preference" };

/** The kind as a select of its two values, labelled in words (the API's enum values stay the option values). */
function KindField(props: { formId: string; form: "MemoryCreate" | "MemoryPatch"; value: Kind; error?: string | undefined; onChange: (kind: Kind) => void }) {
  const spec = fieldsOf(props.form).kind ?? { type: "enum", enum: ["fact", "preference"] };
  return (
    <Field formId={props.formId} name="kind" spec={spec} label="Kind" error={props.error} value={props.value} onChange={(value) => props.onChange(value as Kind)}>
      {(input) => (
        <select
          id={input.id}
          name={input.name}
          aria-describedby={input.describedBy || undefined}
          aria-invalid={input.invalid || undefined}
          value={props.value}
          onChange={(event) => props.onChange(event.target.value as Kind)}
        >
          {(spec.enum ?? ["fact", "preference"]).map((option) => (
            <option key={option} value={option}>
              {KIND_LABELS[option as Kind] ?? option}
            </option>
          ))}
        </select>
      )}
    </Field>
  );
}

function PinnedField(props: { formId: string; form: "MemoryCreate" | "MemoryPatch"; value: boolean; error?: string | undefined; onChange: (pinned: boolean) => void }) {
  const spec = fieldsOf(props.form).pinned ?? { type: "boolean" };
  return <Field formId={props.formId} name="pinned" spec={spec} label="Pinned" error={props.error} value={props.value} onChange={(value) => props.onChange(value === true)} />;
}

function NewMemory(props: { onCreated: () => void }) {
  const formId = useId().replace(/:/g, "");
  const [content, setContent] = useState("");
  const [kind, setKind] = useState<Kind>("fact");
  const [pinned, setPinned] = useState(false);
  const submit = useSubmit(["content", "kind", "pinned"]);
  const spec = fieldsOf("MemoryCreate").content ?? { type: "string" };
  const onSubmit = async (event: FormEvent) => {
    event.preventDefault();
    const created = await submit.run(() => api.createMemory({ content, kind, pinned }));
    if (created !== undefined) {
      setContent("");
      setKind("fact");
      setPinned(false);
      props.onCreated();
    }
  };
  return (
    <form className="settings-form card" noValidate onSubmit={(event) => void onSubmit(event)} data-form="MemoryCreate">
      <Field formId={formId} name="content" spec={spec} label="New memory" error={submit.errors.content} value={content} onChange={(value) => setContent(String(value))} />
      <KindField formId={formId} form="MemoryCreate" value={kind} error={submit.errors.kind} onChange={setKind} />
      <PinnedField formId={formId} form="MemoryCreate" value={pinned} error={submit.errors.pinned} onChange={setPinned} />
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
  const [kind, setKind] = useState<Kind>(memory.kind);
  const [pinned, setPinned] = useState(memory.pinned);
  const submit = useSubmit(["content", "kind", "pinned"]);
  const spec = fieldsOf("MemoryPatch").content ?? { type: "string" };
  const cancel = () => {
    setContent(memory.content);
    setKind(memory.kind);
    setPinned(memory.pinned);
    submit.setErrors({});
    submit.setState({ kind: "idle" });
    setEditing(false);
  };
  const onSubmit = async (event: FormEvent) => {
    event.preventDefault();
    // Only what changed is sent: the API refuses an empty change, and an unchanged field is no edit.
    const patch: MemoryPatch = {};
    if (content !== memory.content) patch.content = content;
    if (kind !== memory.kind) patch.kind = kind;
    if (pinned !== memory.pinned) patch.pinned = pinned;
    if (Object.keys(patch).length === 0) {
      setEditing(false);
      return;
    }
    const saved = await submit.run(() => api.patchMemory(memory.id, patch));
    if (saved !== undefined) props.onSaved();
  };
  return (
    <li className="card task" data-testid="memory-item" data-memory-id={memory.id} data-kind={memory.kind} data-pinned={memory.pinned}>
      {editing ? (
        <form noValidate onSubmit={(event) => void onSubmit(event)} className="settings-form">
          <Field formId={formId} name="content" spec={spec} label="Memory" error={submit.errors.content} value={content} onChange={(value) => setContent(String(value))} />
          <KindField formId={formId} form="MemoryPatch" value={kind} error={submit.errors.kind} onChange={setKind} />
          <PinnedField formId={formId} form="MemoryPatch" value={pinned} error={submit.errors.pinned} onChange={setPinned} />
          <div className="form-actions">
            <button type="submit" className="primary small">
              Save
            </button>
            <button type="button" className="ghost small" onClick={cancel}>
              Cancel
            </button>
            <SubmitStatus state={submit.state} />
          </div>
        </form>
      ) : (
        <p className="memory-content">{memory.content}</p>
      )}
      <div className="task-meta muted">
        <span className="badge pending" data-testid="memory-kind">
          {KIND_LABELS[memory.kind]}
        </span>
        {memory.pinned ? (
          <span className="badge ok" data-testid="memory-pinned" title="The agent never changes a pinned memory, and it never ages out.">
            pinned
          </span>
        ) : null}
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
