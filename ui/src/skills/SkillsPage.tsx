// Per-agent Agent Skills: list, edit, enable or disable, and import or export a SKILL.md.
import { useEffect, useId, useState, type FormEvent } from "react";
import { api } from "../api/client";
import type { SkillOut } from "../api/types";
import { ErrorText, LoadError } from "../common/ErrorText";
import { messageOf, useLoad } from "../common/useLoad";
import { skillsApi } from "../autonomy/api";

type Draft = { name: string; description: string; instructions: string; enabled: boolean };

const EMPTY: Draft = { name: "", description: "", instructions: "", enabled: true };

function draftOf(skill: SkillOut): Draft {
  return { name: skill.name, description: skill.description, instructions: skill.instructions, enabled: skill.enabled };
}

function download(name: string, text: string) {
  const url = URL.createObjectURL(new Blob([text], { type: "text/markdown" }));
  const link = document.createElement("a");
  link.href = url;
  link.download = `${name}.SKILL.md`;
  link.click();
  URL.revokeObjectURL(url);
}

function SkillEditor(props: { agentId: string; skill: SkillOut | null; onSaved: () => Promise<void>; onCancel: () => void }) {
  const id = useId();
  const [draft, setDraft] = useState<Draft>(props.skill ? draftOf(props.skill) : EMPTY);
  const [error, setError] = useState<string | null>(null);
  const [saving, setSaving] = useState(false);
  useEffect(() => setDraft(props.skill ? draftOf(props.skill) : EMPTY), [props.skill]);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setSaving(true);
    setError(null);
    try {
      if (props.skill) await skillsApi.update(props.agentId, props.skill.id, draft);
      else await skillsApi.create(props.agentId, draft);
      await props.onSaved();
    } catch (caught) {
      setError(messageOf(caught));
    } finally {
      setSaving(false);
    }
  };

  return (
    <form className="card settings-form" onSubmit={(event) => void submit(event)} aria-label={props.skill ? "Edit skill" : "New skill"}>
      {props.skill?.evolutionManaged ? (
        <p className="banner warn">This skill was learned. Saving an edit makes it yours: learning will no longer change or revert it.</p>
      ) : null}
      <div className="field">
        <label className="field-label" htmlFor={`${id}-name`}>Name</label>
        <input id={`${id}-name`} value={draft.name} maxLength={64} pattern="[a-z0-9]+(-[a-z0-9]+)*" required
          onChange={(event) => setDraft({ ...draft, name: event.target.value })} />
        <span className="field-hint">Lowercase letters, digits and single hyphens.</span>
      </div>
      <div className="field">
        <label className="field-label" htmlFor={`${id}-description`}>Description</label>
        <textarea id={`${id}-description`} value={draft.description} maxLength={1024} required rows={2}
          onChange={(event) => setDraft({ ...draft, description: event.target.value })} />
        <span className="field-hint">What the agent reads to decide when to load it.</span>
      </div>
      <div className="field">
        <label className="field-label" htmlFor={`${id}-instructions`}>Instructions (Markdown)</label>
        <textarea id={`${id}-instructions`} value={draft.instructions} maxLength={50000} required rows={12}
          onChange={(event) => setDraft({ ...draft, instructions: event.target.value })} />
      </div>
      <label className="checkbox-option">
        <input type="checkbox" checked={draft.enabled} onChange={(event) => setDraft({ ...draft, enabled: event.target.checked })} />
        Enabled (a disabled skill never reaches a run)
      </label>
      <ErrorText error={error} />
      <div className="form-actions">
        <button type="submit" disabled={saving}>{props.skill ? "Save" : "Add skill"}</button>
        <button type="button" className="ghost" onClick={props.onCancel}>Cancel</button>
      </div>
    </form>
  );
}

function ImportForm(props: { agentId: string; onImported: () => Promise<void> }) {
  const id = useId();
  const [text, setText] = useState("");
  const [error, setError] = useState<string | null>(null);
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setError(null);
    try {
      await skillsApi.create(props.agentId, { skillMd: text });
      setText("");
      await props.onImported();
    } catch (caught) {
      setError(messageOf(caught));
    }
  };
  return (
    <form className="settings-form" onSubmit={(event) => void submit(event)} aria-label="Import a SKILL.md">
      <div className="field">
        <label className="field-label" htmlFor={`${id}-file`}>SKILL.md file</label>
        <input id={`${id}-file`} type="file" accept=".md,text/markdown"
          onChange={(event) => void event.target.files?.[0]?.text().then(setText)} />
      </div>
      <div className="field">
        <label className="field-label" htmlFor={`${id}-text`}>or paste it</label>
        <textarea id={`${id}-text`} rows={8} value={text} onChange={(event) => setText(event.target.value)}
          placeholder={"---\nname: my-skill\ndescription: What it does and when to use it.\n---\n# Instructions"} />
      </div>
      <ErrorText error={error} />
      <div className="form-actions">
        <button type="submit" disabled={!text.trim()}>Import</button>
      </div>
    </form>
  );
}

export default function SkillsPage(props: { agentId: string | null }) {
  const agents = useLoad(["agents"], api.agents);
  const agentIds = agents.data?.agents.map((agent) => agent.id) ?? [];
  const agentId = props.agentId && agentIds.includes(props.agentId) ? props.agentId : agentIds[0] ?? "";
  const skills = useLoad(["skills", agentId], () => (agentId ? skillsApi.list(agentId) : Promise.resolve({ skills: [] })));
  const [editing, setEditing] = useState<SkillOut | "new" | null>(null);
  const [actionError, setActionError] = useState<string | null>(null);

  const saved = async () => {
    setEditing(null);
    await skills.reload();
  };
  const remove = async (skill: SkillOut) => {
    setActionError(null);
    try {
      await skillsApi.remove(agentId, skill.id);
    } catch (caught) {
      setActionError(`Could not delete ${skill.name}: ${messageOf(caught)}`);
    }
    await skills.reload();
  };

  return (
    <div className="page tasks-page">
      <h1>Skills</h1>
      <nav className="tabs" aria-label="Agents">
        {agentIds.map((id) => (
          <a key={id} href={`#/skills/${encodeURIComponent(id)}`} aria-current={id === agentId ? "page" : undefined}>
            {agents.data?.agents.find((agent) => agent.id === id)?.displayName ?? id}
          </a>
        ))}
      </nav>
      {actionError ? <p role="alert" className="banner bad">{actionError}</p> : null}
      <LoadError what="skills" error={skills.error} />
      <section className="stack" aria-label="Skills of the agent">
        <div className="section-head">
          <h2>{agentId || "…"}</h2>
          <button type="button" className="ghost small" onClick={() => setEditing("new")}>New skill</button>
        </div>
        {editing === "new" ? <SkillEditor agentId={agentId} skill={null} onSaved={saved} onCancel={() => setEditing(null)} /> : null}
        <details className="card">
          <summary>Import a SKILL.md</summary>
          <ImportForm agentId={agentId} onImported={saved} />
        </details>
        <ul className="task-list" data-testid="skill-list">
          {skills.data?.skills.length === 0 ? <li className="muted">No skills.</li> : null}
          {skills.data?.skills.map((skill) => (
            <li key={skill.id} className="card">
              <div className="task-head">
                <strong>{skill.name}</strong>
                {skill.evolutionManaged ? <span className="badge pending">learned</span> : null}
                {skill.enabled ? null : <span className="badge warn">disabled</span>}
              </div>
              <p>{skill.description}</p>
              {skill.attribution ? <p className="muted small-text">{skill.attribution}</p> : null}
              <div className="task-actions">
                <button type="button" className="ghost small" onClick={() => setEditing(skill)}>Edit</button>
                <button type="button" className="ghost small" onClick={() => download(skill.name, skill.skillMd)}>Export SKILL.md</button>
                <button type="button" className="ghost small danger-text" onClick={() => void remove(skill)}>Delete</button>
              </div>
              {editing !== "new" && editing?.id === skill.id ? (
                <SkillEditor agentId={agentId} skill={skill} onSaved={saved} onCancel={() => setEditing(null)} />
              ) : null}
            </li>
          ))}
        </ul>
      </section>
    </div>
  );
}
