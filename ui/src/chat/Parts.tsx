import {
  getToolName,
  isDataUIPart,
  isReasoningUIPart,
  isTextUIPart,
  isToolUIPart,
  type DynamicToolUIPart,
  type ToolUIPart,
  type UIMessage,
} from "ai";
import { Suspense, lazy, type JSX } from "react";
import { record } from "./meta";
import { WorkspaceResult, hasWorkspaceView, isWorkspaceTool, workspaceSummary } from "./WorkspaceParts";

type Part = UIMessage["parts"][number];

// The Markdown renderer and its grammars are their own chunks: the first paint stays small.
const Markdown = lazy(() => import("./Markdown"));

/** An answer's text: plain while the renderer loads, then rendered Markdown. A user's text stays as typed. */
function TextPart({ text, role, streaming }: { text: string; role: UIMessage["role"]; streaming: boolean }) {
  const plain = (
    <div className="text" data-testid="message-text">
      {text}
      {streaming ? <span className="caret" aria-hidden="true" /> : null}
    </div>
  );
  if (role === "user") return plain;
  return (
    <div className="text rendered" data-testid="message-text">
      <Suspense fallback={<div className="plain-fallback">{text}</div>}>
        <Markdown text={text} streaming={streaming} />
      </Suspense>
      {streaming ? <span className="caret" aria-hidden="true" /> : null}
    </div>
  );
}

function compactJson(value: unknown, max = 80): string {
  let text: string;
  try {
    text = typeof value === "string" ? value : JSON.stringify(value) ?? "";
  } catch {
    text = String(value);
  }
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function prettyJson(value: unknown): string {
  try {
    return typeof value === "string" ? value : JSON.stringify(value, null, 2) ?? "";
  } catch {
    return String(value);
  }
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

const WEB_VIEWS: Record<string, (props: { output: unknown }) => JSX.Element> = {
  webSearch: SearchResults,
  webFetch: FetchedPage,
};

/** One tool call on one line; input and output behind a disclosure. Web results show readably below it. */
export function ToolCall({ part }: { part: ToolUIPart | DynamicToolUIPart }) {
  const name = getToolName(part);
  const WebView = part.state === "output-available" ? WEB_VIEWS[name] : undefined;
  return (
    <>
      <ToolLine part={part} />
      {WebView && part.state === "output-available" ? <WebView output={part.output} /> : null}
    </>
  );
}

function ToolLine({ part }: { part: ToolUIPart | DynamicToolUIPart }) {
  const name = getToolName(part);
  // A hook's deny comes back as the tool's error; say so rather than "failed".
  const hookDenied = part.state === "output-error" && /denied by a hook/i.test(part.errorText ?? "");
  const state = hookDenied ? { label: "denied by a hook", tone: "bad" } : (TOOL_STATE[part.state] ?? { label: part.state, tone: "pending" });
  const input = "input" in part ? part.input : undefined;
  const output = part.state === "output-available" ? part.output : undefined;
  const workspace = isWorkspaceTool(name);
  const special = hasWorkspaceView(name) && part.state === "output-available" ? <WorkspaceResult name={name} input={input} output={output} /> : null;
  return (
    <details className={workspace ? "tool workspace-tool" : "tool"} data-testid="tool-call" data-tool={name} data-state={part.state}>
      <summary>
        <span className="tool-name">{name}</span>
        <code className="tool-args">{workspace ? workspaceSummary(name, input, output) : compactJson(input ?? {})}</code>
        <span className={`badge ${state.tone}`}>{state.label}</span>
      </summary>
      <div className="tool-body">
        {special ?? (
          <div className="tool-section">
            <span className="tool-label">Input</span>
            <pre>{prettyJson(input ?? {})}</pre>
          </div>
        )}
        {part.state === "output-available" && special === null ? (
          <div className="tool-section">
            <span className="tool-label">Result</span>
            <pre>{prettyJson(part.output)}</pre>
          </div>
        ) : null}
        {part.state === "output-error" ? (
          <div className="tool-section">
            <span className="tool-label">Error</span>
            <pre className="error-text">{part.errorText}</pre>
          </div>
        ) : null}
      </div>
    </details>
  );
}

function pick(data: Record<string, unknown>, ...names: string[]): string | null {
  for (const name of names) {
    const value = data[name];
    if (typeof value === "string" && value) return value;
    if (typeof value === "number") return String(value);
  }
  return null;
}

const SHOWN = new Set([
  "agent", "agentId", "agentName", "specialist", "name", "status", "phase", "state", "iteration", "step",
  "iterations", "text", "summary", "message", "model", "durationMs", "reason", "error", "errorClass", "threadId",
]);

type Iteration = { step?: unknown; toolCalls?: unknown; preview?: unknown };

function iterationsOf(fields: Record<string, unknown>): Iteration[] {
  return Array.isArray(fields.iterations) ? (fields.iterations as unknown[]).map((item) => record(item) as Iteration) : [];
}

function tone(status: string): string {
  if (/fail|error|denied|cancel/i.test(status)) return "bad";
  if (/done|complete|finish|ok|success/i.test(status)) return "ok";
  return "pending";
}

/** A specialist's delegation telemetry (`data-agentActivity`), re-sent under one id as it iterates; live and after reload. */
export function AgentActivity({ data }: { data: unknown }) {
  const fields = record(data);
  const agent = pick(fields, "agentName", "agent", "agentId", "specialist", "name") ?? "specialist";
  const status = pick(fields, "status", "phase", "state");
  const iterations = iterationsOf(fields);
  const iteration = pick(fields, "iteration", "step") ?? (iterations.length ? String(iterations.length) : null);
  const last = iterations[iterations.length - 1];
  const text =
    pick(fields, "summary", "text", "message", "reason", "error") ?? (typeof last?.preview === "string" ? last.preview : null);
  const model = pick(fields, "model");
  const duration = typeof fields.durationMs === "number" ? `${(fields.durationMs / 1000).toFixed(1)} s` : null;
  const rest = Object.entries(fields).filter(([key]) => !SHOWN.has(key));
  return (
    <div className="activity" data-testid="agent-activity" data-agent={agent} data-status={status ?? ""} role="group" aria-label={`Delegation to ${agent}`}>
      <div className="activity-head">
        <span aria-hidden="true" className="activity-icon">↳</span>
        <span className="activity-agent">{agent}</span>
        {status ? <span className={`badge ${tone(status)}`}>{status}</span> : null}
        {iteration ? <span className="muted">iteration {iteration}</span> : null}
        {model ? <span className="muted">{model}</span> : null}
        {duration ? <span className="muted">{duration}</span> : null}
      </div>
      {text ? <p className="activity-text">{text}</p> : null}
      {iterations.length || rest.length ? (
        <details className="activity-more">
          <summary>details</summary>
          {iterations.length ? (
            <ol className="activity-iterations">
              {iterations.map((step, index) => {
                const tools = Array.isArray(step.toolCalls) ? (step.toolCalls as unknown[]).map(String) : [];
                return (
                  <li key={index}>
                    {tools.length ? <code>{tools.join(", ")}</code> : <span className="muted">no tool calls</span>}
                    {typeof step.preview === "string" && step.preview ? <span> — {step.preview}</span> : null}
                  </li>
                );
              })}
            </ol>
          ) : null}
          {rest.length ? <pre>{prettyJson(Object.fromEntries(rest))}</pre> : null}
        </details>
      ) : null}
    </div>
  );
}

export function MessageParts({ message, streaming }: { message: UIMessage; streaming: boolean }) {
  return (
    <>
      {message.parts.map((part: Part, index) => {
        const key = `${index}-${part.type}`;
        if (isTextUIPart(part)) {
          return <TextPart key={key} text={part.text} role={message.role} streaming={streaming && part.state === "streaming"} />;
        }
        if (isReasoningUIPart(part)) {
          return (
            <details key={key} className="reasoning">
              <summary>Reasoning</summary>
              <div className="text">{part.text}</div>
            </details>
          );
        }
        if (isToolUIPart(part)) return <ToolCall key={key} part={part} />;
        if (isDataUIPart(part) && part.type === "data-agentActivity") return <AgentActivity key={key} data={part.data} />;
        return null;
      })}
    </>
  );
}
