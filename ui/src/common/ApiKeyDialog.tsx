import { useEffect, useRef, useState, type FormEvent } from "react";
import { installKeyPrompt } from "../api/auth";
import { Modal } from "./Modal";

/** Asks for the API key when the API answers 401; the answer is kept in this browser. */
export function ApiKeyDialog() {
  const [ask, setAsk] = useState<{ rejected: boolean } | null>(null);
  const [value, setValue] = useState("");
  const resolver = useRef<((key: string) => void) | null>(null);

  useEffect(() => {
    installKeyPrompt(
      (rejected) =>
        new Promise<string>((resolve) => {
          resolver.current = resolve;
          setValue("");
          setAsk({ rejected });
        }),
    );
    return () => installKeyPrompt(null);
  }, []);

  const submit = (event: FormEvent) => {
    event.preventDefault();
    const key = value.trim();
    if (!key) return;
    setAsk(null);
    resolver.current?.(key);
    resolver.current = null;
  };

  return (
    <Modal open={ask !== null} title="API key needed">
      <form onSubmit={submit} className="modal-body stack">
        <p>
          This popagent server asks for its API key (<code>POPAGENT_API_KEY</code>). It is kept in this browser.
        </p>
        {ask?.rejected ? (
          <p role="alert" className="error-text">
            The server refused that key. Try again.
          </p>
        ) : null}
        <label className="field">
          <span className="field-label">API key</span>
          <input
            type="password"
            name="apiKey"
            autoComplete="current-password"
            autoFocus
            value={value}
            onChange={(event) => setValue(event.target.value)}
          />
        </label>
        <div className="modal-actions">
          <button type="submit" className="primary" disabled={!value.trim()}>
            Use this key
          </button>
        </div>
      </form>
    </Modal>
  );
}
