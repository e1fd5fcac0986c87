// Long-term memories (popagent_memories), listed under Settings: add, correct, re-kind, pin and forget.
import { useId, useState, type FormEvent } from "react";
import { api } from "../api/client";
import type { MemoryOut, MemoryPatch } from "../api/types";
import { ErrorText, LoadError } from "../common/ErrorText";
import { useConfirm } from "../common/confirm";
import { Field, SelectInput, SubmitStatus, fieldsOf, useSubmit } from "../common/forms";
import { stamp } from "../common/stamp";
import { messageOf, useLoad } from "../common/useLoad";

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
      <ErrorText error={error} />
      <LoadError what="memories" error={list.error} />
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
        <SelectInput input={input} value={props.value} options={(spec.enum ?? ["fact", "preference"]).map((option) => [option, KIND_LABELS[option as Kind] ?? option])} />
      )}
    </Field>
  );
}

function PinnedField(props: { formId: string; form: "MemoryCreate" | "MemoryPatch"; value: boolean; error?: string | undefined; onChange: (pinned: boolean) => void }) {
  const spec = fieldsOf(props.form).pinned ?? { type: "boolean" };
  return <Field formId={props.formId} name="pinned" spec={spec} label="Pinned" error={props.error} value={props.value} onChange={(value) => props.onChange(value === true)} />;
}

/** What the create and edit forms hold: the memory's three fields. */
type Draft = { content: string; kind: Kind; pinned: boolean };

const EMPTY: Draft = { content: "", kind: "fact", pinned: false };

/** A memory's fields in a create (`MemoryCreate`) or edit (`MemoryPatch`) form, with the server's messages. */
function MemoryFields(props: { formId: string; form: "MemoryCreate" | "MemoryPatch"; label: string; draft: Draft; errors: Record<string, string>; onChange: (draft: Draft) => void }) {
  const { formId, form, draft, errors, onChange } = props;
  const spec = fieldsOf(form).content ?? { type: "string" };
  return (
    <>
      <Field formId={formId} name="content" spec={spec} label={props.label} error={errors.content} value={draft.content} onChange={(value) => onChange({ ...draft, content: String(value) })} />
      <KindField formId={formId} form={form} value={draft.kind} error={errors.kind} onChange={(kind) => onChange({ ...draft, kind })} />
      <PinnedField formId={formId} form={form} value={draft.pinned} error={errors.pinned} onChange={(pinned) => onChange({ ...draft, pinned })} />
    </>
  );
}

function NewMemory(props: { onCreated: () => void }) {
  const formId = useId().replace(/:/g, "");
  const [draft, setDraft] = useState<Draft>(EMPTY);
  const submit = useSubmit(["content", "kind", "pinned"]);
  const onSubmit = async (event: FormEvent) => {
    event.preventDefault();
    const created = await submit.run(() => api.createMemory(draft));
    if (created !== undefined) {
      setDraft(EMPTY);
      props.onCreated();
    }
  };
  return (
    <form className="settings-form card" noValidate onSubmit={(event) => void onSubmit(event)} data-form="MemoryCreate">
      <MemoryFields formId={formId} form="MemoryCreate" label="New memory" draft={draft} errors={submit.errors} onChange={setDraft} />
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
  const stored: Draft = { content: memory.content, kind: memory.kind, pinned: memory.pinned };
  const [draft, setDraft] = useState<Draft>(stored);
  const submit = useSubmit(["content", "kind", "pinned"]);
  const cancel = () => {
    setDraft(stored);
    submit.setErrors({});
    submit.setState({ kind: "idle" });
    setEditing(false);
  };
  const onSubmit = async (event: FormEvent) => {
    event.preventDefault();
    // Only what changed is sent: the API refuses an empty change, and an unchanged field is no edit.
    const patch: MemoryPatch = {};
    if (draft.content !== memory.content) patch.content = draft.content;
    if (draft.kind !== memory.kind) patch.kind = draft.kind;
    if (draft.pinned !== memory.pinned) patch.pinned = draft.pinned;
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
          <MemoryFields formId={formId} form="MemoryPatch" label="Memory" draft={draft} errors={submit.errors} onChange={setDraft} />
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
