// Files attached to chat messages: uploaded to the session before the message is sent (the message's
// file parts name them by their download route), shown on the sent message, copied into the workspace.
import type { FileUIPart } from "ai";
import { useEffect, useState } from "react";
import { authedFetch } from "../api/auth";
import { reasonOf } from "../api/client";

/** What the gateway keeps (docs/attachments.md): the same limits the server enforces, checked first here. */
export const MAX_ATTACHMENT_BYTES = 4 * 1024 * 1024;
export const MAX_ATTACHMENTS_PER_MESSAGE = 8;
const ACCEPT = "image/png,image/jpeg,image/gif,image/webp,application/pdf,text/*,.md,.csv,.json,.txt,.py,.ts,.tsx,.js,.go,.rs,.java,.c,.h,.cpp,.yaml,.yml,.toml,.sql,.sh";

/** A new chat's first message, typed (and its files attached) before the chat's view opened. */
export type FirstMessage = { text: string; files: FileUIPart[] };

type Stored = { id: string; filename: string; mediaType: string; size: number; url: string };

async function failure(response: Response, what: string): Promise<Error> {
  const body: unknown = await response.json().catch(() => null);
  return new Error(`${what}: ${reasonOf(response.status, body, response.statusText)}`);
}

export async function uploadAttachment(sessionId: string, file: File): Promise<FileUIPart> {
  if (file.size > MAX_ATTACHMENT_BYTES) throw new Error(`${file.name} is larger than 4 MiB`);
  const response = await authedFetch(
    `/api/sessions/${encodeURIComponent(sessionId)}/attachments?filename=${encodeURIComponent(file.name || "pasted")}`,
    { method: "POST", body: file, headers: { "content-type": "application/octet-stream" } },
  );
  if (!response.ok) throw await failure(response, `${file.name} was not attached`);
  const stored = (await response.json()) as Stored;
  return { type: "file", mediaType: stored.mediaType, filename: stored.filename, url: stored.url };
}

/** A stored attachment's bytes as a blob: URL (an <img> or a link cannot send the API key itself). */
function useBlobUrl(url: string, wanted: boolean): string | null {
  const [blob, setBlob] = useState<string | null>(null);
  useEffect(() => {
    if (!wanted) return;
    let made: string | null = null;
    let live = true;
    void authedFetch(url).then(async (response) => {
      if (!response.ok || !live) return;
      made = URL.createObjectURL(await response.blob());
      setBlob(made);
    });
    return () => {
      live = false;
      if (made) URL.revokeObjectURL(made);
    };
  }, [url, wanted]);
  return blob;
}

function isStored(url: string): boolean {
  return url.startsWith("/api/sessions/");
}

async function download(part: FileUIPart) {
  const response = await authedFetch(part.url);
  if (!response.ok) throw await failure(response, "download failed");
  const link = document.createElement("a");
  link.href = URL.createObjectURL(await response.blob());
  link.download = part.filename ?? "attachment";
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

/** A file part of a sent message: a thumbnail for an image, else a chip; download, and copy into the workspace. */
export function AttachmentView({ part }: { part: FileUIPart }) {
  const stored = isStored(part.url);
  const image = part.mediaType.startsWith("image/");
  const thumbnail = useBlobUrl(part.url, stored && image);
  const [note, setNote] = useState<string | null>(null);
  const name = part.filename ?? "attachment";
  const copy = async () => {
    setNote("copying…");
    const response = await authedFetch(`${part.url}/copy-to-workspace`, {
      method: "POST",
      body: "{}",
      headers: { "content-type": "application/json" },
    });
    if (!response.ok) {
      setNote((await failure(response, "Not copied")).message);
      return;
    }
    const copied = (await response.json()) as { workspaceId: string; path: string };
    setNote(`Copied to ${copied.path} in ${copied.workspaceId}`);
  };
  return (
    <div className="attachment" data-testid="attachment" data-filename={name}>
      {image && thumbnail ? <img className="attachment-thumb" src={thumbnail} alt={name} /> : null}
      <span className="attachment-name">{name}</span>
      <span className="muted">{part.mediaType}</span>
      {stored ? (
        <>
          <button type="button" className="link-button" onClick={() => void download(part).catch((e: Error) => setNote(e.message))}>
            Download
          </button>
          <button type="button" className="link-button" data-testid="copy-to-workspace" onClick={() => void copy()}>
            Copy to workspace
          </button>
        </>
      ) : null}
      {note ? (
        <span className="attachment-note" role="status">
          {note}
        </span>
      ) : null}
    </div>
  );
}

/** The files attached to the message being written: added by the button, a paste or a drop, each
 * uploaded at once; removed by their chip. */
export function useAttachments(attachTo: (() => Promise<string>) | undefined) {
  const [files, setFiles] = useState<FileUIPart[]>([]);
  const [uploading, setUploading] = useState(0);
  const [error, setError] = useState<string | null>(null);
  const add = async (picked: File[]) => {
    if (!attachTo || !picked.length) return;
    setError(null);
    const room = MAX_ATTACHMENTS_PER_MESSAGE - files.length - uploading;
    if (picked.length > room) setError(`A message takes at most ${MAX_ATTACHMENTS_PER_MESSAGE} files`);
    const taken = picked.slice(0, Math.max(room, 0));
    setUploading((count) => count + taken.length);
    for (const file of taken) {
      try {
        const part = await uploadAttachment(await attachTo(), file);
        setFiles((current) => [...current, part]);
      } catch (caught) {
        setError((caught as Error).message);
      } finally {
        setUploading((count) => count - 1);
      }
    }
  };
  const remove = (url: string) => setFiles((current) => current.filter((file) => file.url !== url));
  const clear = () => {
    setFiles([]);
    setError(null);
  };
  return { files, uploading, error, add, remove, clear };
}

/** The attach button and the chips of files attached to the message being written. */
export function AttachmentPicker(props: { attachments: ReturnType<typeof useAttachments>; disabled?: boolean }) {
  const { files, uploading, error, add, remove } = props.attachments;
  return (
    <div className="attachment-picker">
      <label className={`composer-attach${props.disabled ? " disabled" : ""}`} title="Attach files (images, PDF, text; 4 MiB each)">
        <span aria-hidden="true">📎</span>
        <span className="visually-hidden">Attach files</span>
        <input
          type="file"
          multiple
          accept={ACCEPT}
          data-testid="attach-input"
          className="visually-hidden"
          disabled={props.disabled}
          onChange={(event) => {
            const picked = Array.from(event.target.files ?? []);
            event.target.value = "";
            void add(picked);
          }}
        />
      </label>
      {files.length || uploading || error ? (
        <ul className="attachment-chips" aria-label="Attached files">
          {files.map((file) => (
            <li key={file.url} className="attachment-chip" data-testid="attachment-chip">
              <span>{file.filename}</span>
              <button
                type="button"
                className="link-button"
                aria-label={`Remove ${file.filename ?? "file"}`}
                onClick={() => remove(file.url)}
              >
                ×
              </button>
            </li>
          ))}
          {uploading ? <li className="muted">uploading…</li> : null}
          {error ? (
            <li className="error-text" role="alert">
              {error}
            </li>
          ) : null}
        </ul>
      ) : null}
    </div>
  );
}
