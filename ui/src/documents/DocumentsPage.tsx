import "./documents.css";
import { Suspense, lazy, useEffect, useId, useState, type FormEvent } from "react";
import type { DocumentSearchOut, IndexStatusOut, WorkspaceOut } from "../api/types";
import { ErrorText } from "../common/ErrorText";
import { stamp } from "../common/stamp";
import { messageOf, useLoad } from "../common/useLoad";
import { href } from "../route";
import { documentsApi } from "./api";

// A passage reads as its document does: rendered Markdown (the chat's lazy renderer).
const Markdown = lazy(() => import("../chat/Markdown"));

const POLL_MS = 1500;
const TONE: Record<IndexStatusOut["state"], string> = { idle: "ok", queued: "pending", running: "pending", failed: "bad" };

/** A workspace's documentation: the index's state and progress, reindexing, and search. */
export default function DocumentsPage(props: { workspaceId: string | null; workspaces: WorkspaceOut[] }) {
  const fallback = props.workspaces.find((w) => w.isDefault)?.id ?? props.workspaces[0]?.id ?? "";
  const workspaceId = props.workspaceId ?? fallback;
  const selectId = useId();

  return (
    <div className="page documents-page">
      <h1>Documentation</h1>
      <p className="muted">
        The workspace's Markdown files and added documents, searchable by meaning and by words. The agents search the same
        index with <code>searchDocs</code>.
      </p>
      <label htmlFor={selectId}>Workspace </label>
      <select
        id={selectId}
        value={workspaceId}
        onChange={(event) => {
          window.location.hash = href({ page: "other", id: "documents", rest: encodeURIComponent(event.target.value) });
        }}
      >
        {props.workspaces.map((workspace) => (
          <option key={workspace.id} value={workspace.id}>
            {workspace.name}
          </option>
        ))}
      </select>
      {workspaceId ? <WorkspaceDocuments key={workspaceId} workspaceId={workspaceId} /> : <p>No workspace is registered.</p>}
    </div>
  );
}

function WorkspaceDocuments({ workspaceId }: { workspaceId: string }) {
  const status = useLoad(["documents-index", workspaceId], () => documentsApi.status(workspaceId), { fresh: true });
  const documents = useLoad(["documents", workspaceId], () => documentsApi.list(workspaceId), { fresh: true });
  const [actionError, setActionError] = useState<string | null>(null);
  const active = status.data?.state === "queued" || status.data?.state === "running";

  useEffect(() => {
    if (!active) return;
    const timer = window.setInterval(() => void status.reload(), POLL_MS);
    return () => window.clearInterval(timer);
  }, [active, status.reload]);
  // When a run ends, the document list has changed.
  useEffect(() => {
    if (!active && status.data) void documents.reload();
  }, [active, status.data?.finishedAt, documents.reload]);

  const reindex = async () => {
    setActionError(null);
    try {
      status.setData(await documentsApi.reindex(workspaceId));
    } catch (error) {
      setActionError(`Could not start indexing: ${messageOf(error)}`);
    }
  };

  const s = status.data;
  return (
    <>
      <section aria-labelledby="index-heading" className="stack">
        <div className="section-head">
          <h2 id="index-heading">Index</h2>
          <button type="button" className="primary small" onClick={() => void reindex()} disabled={active}>
            {s && s.state !== "idle" && s.state !== "failed" ? "Indexing…" : "Reindex"}
          </button>
        </div>
        {actionError ? (
          <p role="alert" className="banner bad">
            {actionError}
          </p>
        ) : null}
        {status.error ? <p className="error-text">Could not load the index status: {messageOf(status.error)}</p> : null}
        {s ? (
          <div className="card" data-testid="index-status" data-state={s.state}>
            <p>
              <span className={`badge ${TONE[s.state]}`}>{s.state}</span> {s.documents} documents, {s.chunks} chunks
              {s.embeddingModel ? <span className="muted"> · {s.embeddingModel}</span> : null}
            </p>
            {s.filesToEmbed > 0 || active ? (
              <p>
                <progress max={Math.max(s.filesToEmbed, 1)} value={s.filesEmbedded} aria-label="Files embedded" />{" "}
                {s.filesEmbedded} of {s.filesToEmbed} changed files embedded ({s.filesSeen} matched, {s.filesRemoved}{" "}
                removed, {s.chunksEmbedded} chunks)
              </p>
            ) : null}
            {s.error ? <p className="error-text">{s.error}</p> : null}
            <p className="muted">
              Includes {s.include.join(", ")}
              {s.exclude.length ? `; excludes ${s.exclude.join(", ")}` : ""} · last run {stamp(s.finishedAt || s.startedAt)}
            </p>
          </div>
        ) : null}
      </section>
      <SearchBox workspaceId={workspaceId} />
      <section aria-labelledby="documents-heading" className="stack">
        <h2 id="documents-heading">Documents</h2>
        {documents.error ? <p className="error-text">{messageOf(documents.error)}</p> : null}
        <ul className="plain-list">
          {(documents.data?.documents ?? []).map((document) => (
            <li key={document.id}>
              <code>{document.path}</code> <span className="muted">{document.title}</span>{" "}
              <span className="badge">{document.origin}</span>{" "}
              {document.indexed ? null : <span className="badge warn">not indexed</span>}
            </li>
          ))}
        </ul>
      </section>
    </>
  );
}

function SearchBox({ workspaceId }: { workspaceId: string }) {
  const [query, setQuery] = useState("");
  const [prefix, setPrefix] = useState("");
  const [result, setResult] = useState<DocumentSearchOut | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const queryId = useId();
  const prefixId = useId();

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    if (!query.trim()) return;
    setBusy(true);
    setError(null);
    try {
      setResult(await documentsApi.search(workspaceId, { query, k: 10, pathPrefix: prefix }));
    } catch (caught) {
      setError(messageOf(caught));
    } finally {
      setBusy(false);
    }
  };

  return (
    <section aria-labelledby="search-heading" className="stack">
      <h2 id="search-heading">Search</h2>
      <form onSubmit={(event) => void submit(event)} role="search">
        <label htmlFor={queryId}>Question or keywords</label>
        <input id={queryId} value={query} maxLength={2000} onChange={(event) => setQuery(event.target.value)} />
        <label htmlFor={prefixId}>Path starts with (optional)</label>
        <input id={prefixId} value={prefix} maxLength={1024} onChange={(event) => setPrefix(event.target.value)} />
        <button type="submit" className="primary" disabled={busy || !query.trim()}>
          Search
        </button>
      </form>
      <ErrorText error={error} />
      {result ? (
        <ol className="plain-list" aria-label="Search results" data-ranking={result.ranking}>
          {result.hits.length === 0 ? <li className="muted">No passage matches.</li> : null}
          {result.hits.map((hit, index) => (
            <li key={`${hit.documentId}-${index}`} className="card">
              <p>
                <code>{hit.path}</code>
                {hit.headingPath.length ? <span> › {hit.headingPath.join(" › ")}</span> : null}
              </p>
              <div className="doc-excerpt" data-testid="doc-excerpt">
                <Suspense fallback={<p className="pre-line">{hit.content}</p>}>
                  <Markdown text={hit.content} streaming={false} />
                </Suspense>
              </div>
            </li>
          ))}
        </ol>
      ) : null}
    </section>
  );
}
