import { useState, type FormEvent } from "react";
import { storeKey, storedKey } from "../api/auth";
import { DEFAULT_NON_CHAT_WORDS, nonChatWords, setNonChatWords } from "../chat/models";
import { useUnsaved } from "../common/unsaved";

/** What this browser keeps for itself (localStorage, shared by its tabs): the API key and the model filter. */
export function ThisBrowser(props: { onModelsChanged: () => void }) {
  return (
    <div className="stack">
      <ApiKeyForm />
      <ModelWordsForm onSaved={props.onModelsChanged} />
    </div>
  );
}

function ApiKeyForm() {
  const [key, setKey] = useState("");
  const [stored, setStored] = useState(() => storedKey());
  const [status, setStatus] = useState<string | null>(null);
  useUnsaved(key.trim() !== "", "API key");
  const save = (event: FormEvent) => {
    event.preventDefault();
    if (!key.trim()) return;
    storeKey(key.trim());
    setStored(key.trim());
    setKey("");
    setStatus("Saved: the new key is used from the next request on, in every tab of this browser.");
  };
  const forget = () => {
    storeKey("");
    setStored(null);
    setStatus("Forgotten: the next request asks for a key.");
  };
  return (
    <form className="settings-form" onSubmit={save} aria-labelledby="api-key-title" data-form="ApiKey">
      <div className="form-head">
        <h2 id="api-key-title">API key</h2>
        <p className="muted">
          The key this browser sends to the server (<code>POPAGENT_API_KEY</code>). It is kept in this browser, for all its tabs, until you change
          or forget it.
        </p>
      </div>
      <p data-testid="api-key-state">
        {stored ? (
          <>
            A key is stored, ending in <code>…{stored.slice(-4)}</code>.
          </>
        ) : (
          "No key is stored."
        )}
      </p>
      <div className="field">
        <label htmlFor="new-api-key" className="field-label">
          New API key
        </label>
        <input id="new-api-key" type="password" autoComplete="off" value={key} onChange={(event) => setKey(event.target.value)} />
      </div>
      <div className="form-actions">
        <button type="submit" className="primary" disabled={!key.trim()}>
          Save key
        </button>
        <button type="button" className="ghost" onClick={forget} disabled={!stored}>
          Forget the key
        </button>
        <span className="submit-status" aria-live="polite" data-testid="submit-status" data-state={status ? "saved" : "idle"}>
          {status}
        </span>
      </div>
    </form>
  );
}

function ModelWordsForm(props: { onSaved: () => void }) {
  const [saved, setSaved] = useState(() => nonChatWords());
  const [draft, setDraft] = useState(saved);
  const [status, setStatus] = useState<string | null>(null);
  useUnsaved(draft !== saved, "Models not offered for chat");
  const save = (event: FormEvent) => {
    event.preventDefault();
    setNonChatWords(draft);
    setSaved(draft);
    setStatus(`Saved: models whose id contains ${draft.trim() ? `“${draft.trim()}”` : "nothing (all models offered)"} are left out of the chat's picker.`);
    props.onSaved();
  };
  return (
    <form className="settings-form" onSubmit={save} aria-labelledby="model-words-title" data-form="NonChatModels">
      <div className="form-head">
        <h2 id="model-words-title">Models not offered for chat</h2>
        <p className="muted">
          The model gateway does not say which models are for chat. Models whose id contains one of these words (comma-separated) are left
          out of the chat&apos;s model picker. Default: {DEFAULT_NON_CHAT_WORDS}.
        </p>
      </div>
      <div className="field">
        <label htmlFor="non-chat-words" className="field-label">
          Words
        </label>
        <input id="non-chat-words" value={draft} onChange={(event) => setDraft(event.target.value)} />
      </div>
      <div className="form-actions">
        <button type="submit" className="primary" disabled={draft === saved}>
          Save
        </button>
        <span className="submit-status" aria-live="polite">
          {status}
        </span>
      </div>
    </form>
  );
}
