// How each tool call reads in a conversation: one registry, keyed by the tool's registry name.
// A call is a compact row (name, a one-line summary, its state) that expands to a rendered
// view of its result. A tool without an entry gets the generic view: its input and result as
// readable fields, text and images, not raw JSON. To give a tool its own view, add one line
// to TOOL_VIEWS: `myTool: { summary: (input) => ..., Result: MyToolResult }`.
import { getToolName, type DynamicToolUIPart, type ToolUIPart } from "ai";
import type { JSX, ReactNode } from "react";
import { ApprovalCard, DeniedNote } from "../approvals/ApprovalCard";
import { NavigatorResult } from "../browser/NavigatorResult";
import { record } from "./meta";
import { WORKSPACE_PREFIX, WorkspaceResult, workspaceSummary } from "./WorkspaceParts";

export type ToolViewProps = { name: string; input: unknown; output: unknown };

export type ToolView = {
  /** The row's one line, from the input (and the output once there). */
  summary?: (input: unknown, output: unknown) => string;
  /** The rendered result; null falls back to the generic view. */
  Result?: (props: ToolViewProps) => JSX.Element | null;
  /** Show the result without a click (search results, fetched pages, screenshots). */
  open?: boolean;
};

export function compactJson(value: unknown, max = 80): string {
  let text: string;
  try {
    text = typeof value === "string" ? value : (JSON.stringify(value) ?? "");
  } catch {
    text = String(value);
  }
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

export function prettyJson(value: unknown): string {
  try {
    return typeof value === "string" ? value : (JSON.stringify(value, null, 2) ?? "");
  } catch {
    return String(value);
  }
}

function field(...names: string[]) {
  return (input: unknown) => {
    const args = record(input);
    for (const name of names) {
      const value = args[name];
      if (typeof value === "string" && value) return value;
      if (typeof value === "number") return String(value);
    }
    return compactJson(input ?? {});
  };
}

/** A link only for web addresses: a search result or page could carry `javascript:` or `data:`. */
function webHref(url: unknown): string | undefined {
  return typeof url === "string" && /^https?:\/\//i.test(url) ? url : undefined;
}

function hostOf(url: string): string {
  try {
    return new URL(url).host;
  } catch {
    return url;
  }
}

function text(value: unknown): string {
  return typeof value === "string" ? value : "";
}

function WebLink({ url, label }: { url: string; label: string }) {
  const href = webHref(url);
  return href ? (
    <a href={href} target="_blank" rel="noopener noreferrer nofollow">
      {label || url}
    </a>
  ) : (
    <span>{label || url}</span>
  );
}

/** `webSearch`'s answer: numbered results with their site, engine, date and snippet. */
export function SearchResults({ output }: { output: unknown }) {
  const answer = record(output);
  const results = Array.isArray(answer.results) ? (answer.results as unknown[]).map(record) : [];
  const answers = Array.isArray(answer.answers) ? (answer.answers as unknown[]).map(record) : [];
  const silent = Array.isArray(answer.unresponsiveEngines) ? (answer.unresponsiveEngines as unknown[]).map(String) : [];
  const suggestions = Array.isArray(answer.suggestions) ? (answer.suggestions as unknown[]).map(String) : [];
  return (
    <div className="web-view" data-testid="search-results">
      <div className="web-head">
        <span className="muted">
          Search “{text(answer.query)}”: {results.length} {results.length === 1 ? "result" : "results"}
        </span>
      </div>
      {answers.map((item, index) => (
        <p key={`a${index}`} className="web-answer">
          {text(item.answer)}
          {webHref(item.url) ? (
            <>
              {" "}
              <WebLink url={text(item.url)} label={hostOf(text(item.url))} />
            </>
          ) : null}
        </p>
      ))}
      {results.length ? (
        <ol className="web-results">
          {results.map((item, index) => {
            const url = text(item.url);
            const meta = [hostOf(url), text(item.engine), text(item.date).slice(0, 10)].filter(Boolean).join(" · ");
            return (
              <li key={index} data-testid="search-result">
                <WebLink url={url} label={text(item.title)} />
                <span className="muted web-meta">{meta}</span>
                {text(item.snippet) ? <p className="web-snippet">{text(item.snippet)}</p> : null}
              </li>
            );
          })}
        </ol>
      ) : null}
      {suggestions.length ? <p className="muted">Also try: {suggestions.join(", ")}</p> : null}
      {silent.length ? <p className="muted">No answer from: {silent.join("; ")}</p> : null}
    </div>
  );
}

/** `webFetch`'s page: its title and address, then the page as Markdown text, scrollable. */
export function FetchedPage({ output }: { output: unknown }) {
  const page = record(output);
  const url = text(page.url);
  const markdown = text(page.markdown);
  return (
    <div className="web-view" data-testid="fetched-page">
      <div className="web-head">
        <WebLink url={url} label={text(page.title) || url} />
        <span className="muted web-meta">{hostOf(url)}</span>
        {page.truncated === true ? <span className="badge warn">truncated</span> : null}
      </div>
      {markdown ? <pre className="web-markdown">{markdown}</pre> : <p className="muted">The page has no text.</p>}
    </div>
  );
}

const IMAGE_DATA = /^data:image\/(png|jpeg|webp|gif);base64,[A-Za-z0-9+/=\s]+$/;

/** An image a tool returned (a screenshot): a data: URL, or base64 with its media type beside it. */
function imageOf(value: unknown, mediaType?: unknown): string | null {
  if (typeof value !== "string") return null;
  if (IMAGE_DATA.test(value)) return value;
  if (typeof mediaType === "string" && /^image\/(png|jpeg|webp|gif)$/.test(mediaType) && /^[A-Za-z0-9+/=\s]{64,}$/.test(value)) {
    return `data:${mediaType};base64,${value}`;
  }
  return null;
}

const HIDDEN_KEYS = new Set(["mediaType", "mimeType"]);

function label(key: string): string {
  return key.replace(/([a-z0-9])([A-Z])/g, "$1 $2").replace(/_/g, " ");
}

/** Any value as a person reads it: fields as a list, long text as a block, images as images. */
export function Readable({ value, depth = 0 }: { value: unknown; depth?: number }): ReactNode {
  if (value === null || value === undefined) return <span className="muted">none</span>;
  if (typeof value === "boolean") return <span>{value ? "yes" : "no"}</span>;
  if (typeof value === "number") return <span>{value}</span>;
  if (typeof value === "string") {
    const image = imageOf(value);
    if (image) return <img className="tool-image" src={image} alt="tool result" data-testid="tool-image" />;
    const url = webHref(value);
    if (url && !value.includes(" ")) return <WebLink url={url} label={value} />;
    return value.includes("\n") || value.length > 120 ? <pre className="readable-text">{value}</pre> : <span>{value}</span>;
  }
  if (depth > 4) return <pre>{prettyJson(value)}</pre>;
  if (Array.isArray(value)) {
    if (!value.length) return <span className="muted">empty</span>;
    return (
      <ol className="readable-list">
        {value.slice(0, 100).map((item, index) => (
          <li key={index}>
            <Readable value={item} depth={depth + 1} />
          </li>
        ))}
        {value.length > 100 ? <li className="muted">… {value.length - 100} more</li> : null}
      </ol>
    );
  }
  const entries = Object.entries(record(value));
  if (!entries.length) return <span className="muted">empty</span>;
  const fields = record(value);
  return (
    <dl className="readable-fields">
      {entries
        .filter(([key]) => !HIDDEN_KEYS.has(key))
        .map(([key, item]) => {
          const image = imageOf(item, fields.mediaType ?? fields.mimeType);
          return (
            <div key={key} className="readable-field">
              <dt>{label(key)}</dt>
              <dd>{image ? <img className="tool-image" src={image} alt={label(key)} data-testid="tool-image" /> : <Readable value={item} depth={depth + 1} />}</dd>
            </div>
          );
        })}
    </dl>
  );
}

/** The generic view: input and result as readable fields. */
function GenericResult({ input, output }: ToolViewProps) {
  return (
    <>
      <div className="tool-section">
        <span className="tool-label">Input</span>
        <Readable value={input ?? {}} />
      </div>
      <div className="tool-section">
        <span className="tool-label">Result</span>
        <Readable value={output} />
      </div>
    </>
  );
}

function workspace(open = false): ToolView {
  return {
    summary: () => "",
    Result: ({ name, input, output }) => WorkspaceResult({ name, input, output }),
    open,
  };
}

export const TOOL_VIEWS: Record<string, ToolView> = {
  webSearch: { summary: field("query"), Result: SearchResults, open: true },
  webFetch: { summary: field("url"), Result: FetchedPage, open: true },
  getTime: { summary: field("timezone", "tz") },
  remember: { summary: field("content", "text", "memory") },
  recall: { summary: field("query", "q") },
  searchDocs: { summary: field("query", "q") },
  skill: { summary: field("name", "skill") },
  skill_read: { summary: field("name", "path", "skill") },
  skill_search: { summary: field("query", "q") },
  bifrostNavigator: { summary: field("operation"), Result: ({ output }) => NavigatorResult({ output }), open: true },
  useBrowserSecret: { summary: field("name") },
  mastra_workspace_lsp_inspect: { summary: field("path", "file", "symbol") },
  mastra_workspace_read_file: workspace(),
  mastra_workspace_edit_file: workspace(),
  mastra_workspace_write_file: workspace(),
  mastra_workspace_execute_command: workspace(),
  mastra_workspace_get_process_output: workspace(),
  mastra_workspace_kill_process: workspace(),
  mastra_workspace_list_files: workspace(),
  mastra_workspace_grep: workspace(),
};

/** The view of a tool: its entry, else the generic one (a workspace tool keeps its summary). */
export function viewOf(name: string): ToolView {
  const view = TOOL_VIEWS[name];
  if (view) return view;
  if (name.startsWith(WORKSPACE_PREFIX)) return { summary: () => "" };
  return {};
}

const TOOL_STATE: Record<string, { label: string; tone: string }> = {
  "input-streaming": { label: "preparing", tone: "pending" },
  "input-available": { label: "running", tone: "pending" },
  "approval-requested": { label: "awaiting approval", tone: "pending" },
  "approval-responded": { label: "approved", tone: "pending" },
  "output-available": { label: "done", tone: "ok" },
  "output-error": { label: "failed", tone: "bad" },
  "output-denied": { label: "denied", tone: "bad" },
};

/** One tool call: a compact row that expands to its rendered view. */
export function ToolCall({ part }: { part: ToolUIPart | DynamicToolUIPart }) {
  const name = getToolName(part);
  const view = viewOf(name);
  const workspaceTool = name.startsWith(WORKSPACE_PREFIX);
  // A hook's deny comes back as the tool's error; say so rather than "failed".
  const hookDenied = part.state === "output-error" && /denied by a hook/i.test(part.errorText ?? "");
  const state = hookDenied ? { label: "denied by a hook", tone: "bad" } : (TOOL_STATE[part.state] ?? { label: part.state, tone: "pending" });
  const input = "input" in part ? part.input : undefined;
  const done = part.state === "output-available";
  const output = done ? part.output : undefined;
  const summary = workspaceTool ? workspaceSummary(name, input, output) : (view.summary ?? ((value: unknown) => compactJson(value ?? {})))(input, output);
  const special = done && view.Result ? view.Result({ name, input, output }) : null;
  // A call waiting for a person gets the approval card; a denied one says so, with the reason.
  const approval = "approval" in part ? (part.approval as { id?: string; approved?: boolean; reason?: string } | undefined) : undefined;
  const after =
    part.state === "approval-requested" ? (
      <ApprovalCard toolName={name} approvalId={approval?.id} input={input} />
    ) : part.state === "output-denied" || (part.state === "approval-responded" && approval?.approved === false) ? (
      <DeniedNote approvalId={approval?.id} reason={approval?.reason} />
    ) : part.state === "approval-responded" ? (
      <p className="approval-outcome" role="status" data-testid="approval-outcome">
        Approved. The tool runs now.
      </p>
    ) : null;
  const row = (
    <details className={workspaceTool ? "tool workspace-tool" : "tool"} data-testid="tool-call" data-tool={name} data-state={part.state} open={Boolean(view.open && done) || undefined}>
      <summary>
        <span className="tool-name">{name}</span>
        <code className="tool-args">{summary}</code>
        <span className={`badge ${state.tone}`}>{state.label}</span>
      </summary>
      <div className="tool-body">
        {special ?? (done ? <GenericResult name={name} input={input} output={output} /> : (
          <div className="tool-section">
            <span className="tool-label">Input</span>
            <Readable value={input ?? {}} />
          </div>
        ))}
        {part.state === "output-error" ? (
          <div className="tool-section">
            <span className="tool-label">Error</span>
            <pre className="error-text">{part.errorText}</pre>
          </div>
        ) : null}
      </div>
    </details>
  );
  return after ? (
    <div className="tool-with-approval">
      {row}
      {after}
    </div>
  ) : (
    row
  );
}
