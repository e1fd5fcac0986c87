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
import { record } from "./meta";

type Part = UIMessage["parts"][number];

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

/** One tool call on one line; input and output behind a disclosure. */
export function ToolCall({ part }: { part: ToolUIPart | DynamicToolUIPart }) {
  const name = getToolName(part);
  const state = TOOL_STATE[part.state] ?? { label: part.state, tone: "pending" };
  const input = "input" in part ? part.input : undefined;
  return (
    <details className="tool" data-testid="tool-call" data-tool={name} data-state={part.state}>
      <summary>
        <span className="tool-name">{name}</span>
        <code className="tool-args">{compactJson(input ?? {})}</code>
        <span className={`badge ${state.tone}`}>{state.label}</span>
      </summary>
      <div className="tool-body">
        <div className="tool-section">
          <span className="tool-label">Input</span>
          <pre>{prettyJson(input ?? {})}</pre>
        </div>
        {part.state === "output-available" ? (
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
  "agent", "agentId", "agentName", "specialist", "name", "status", "phase", "state",
  "iteration", "step", "text", "summary", "message",
]);

/** A specialist's delegation telemetry (`data-agentActivity`), live and after reload. */
export function AgentActivity({ data }: { data: unknown }) {
  const fields = record(data);
  const agent = pick(fields, "agentName", "agent", "agentId", "specialist", "name") ?? "specialist";
  const status = pick(fields, "status", "phase", "state");
  const iteration = pick(fields, "iteration", "step");
  const text = pick(fields, "summary", "text", "message");
  const rest = Object.entries(fields).filter(([key]) => !SHOWN.has(key));
  return (
    <div className="activity" data-testid="agent-activity" data-agent={agent} role="group" aria-label={`Delegation to ${agent}`}>
      <div className="activity-head">
        <span aria-hidden="true" className="activity-icon">↳</span>
        <span className="activity-agent">{agent}</span>
        {status ? <span className={`badge ${/fail|error|denied/i.test(status) ? "bad" : /done|complete|finish|ok/i.test(status) ? "ok" : "pending"}`}>{status}</span> : null}
        {iteration ? <span className="muted">iteration {iteration}</span> : null}
      </div>
      {text ? <p className="activity-text">{text}</p> : null}
      {rest.length ? (
        <details className="activity-more">
          <summary>details</summary>
          <pre>{prettyJson(Object.fromEntries(rest))}</pre>
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
          return (
            <div key={key} className="text" data-testid="message-text">
              {part.text}
              {streaming && part.state === "streaming" ? <span className="caret" aria-hidden="true" /> : null}
            </div>
          );
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
