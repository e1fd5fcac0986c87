// Export the open chat: the conversation as Markdown, or the whole session as JSON, downloaded
// with the name the server gives it.
import { useState } from "react";
import { api } from "../api/client";
import { messageOf } from "../common/useLoad";

function download(file: Blob, name: string): void {
  const url = URL.createObjectURL(file);
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  // The click has handed the file to the browser; the URL is not needed after this turn of the loop.
  window.setTimeout(() => URL.revokeObjectURL(url), 0);
}

export function ExportMenu({ sessionId }: { sessionId: string }) {
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  const exportAs = async (format: "markdown" | "json") => {
    setBusy(true);
    setError("");
    try {
      const { file, name } = await api.exportSession(sessionId, format);
      download(file, name);
    } catch (caught) {
      setError(`Export failed: ${messageOf(caught)}`);
    } finally {
      setBusy(false);
    }
  };
  return (
    <details className="export-menu">
      <summary>Export</summary>
      <div className="export-menu-items" role="group" aria-label="Export this chat">
        <button type="button" className="ghost" disabled={busy} onClick={() => void exportAs("markdown")}>
          Markdown (.md)
        </button>
        <button type="button" className="ghost" disabled={busy} onClick={() => void exportAs("json")}>
          JSON (.json)
        </button>
        {error ? (
          <p className="error-text" role="alert">
            {error}
          </p>
        ) : null}
      </div>
    </details>
  );
}
