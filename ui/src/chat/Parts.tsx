import {
  isDataUIPart,
  isFileUIPart,
  isReasoningUIPart,
  isTextUIPart,
  isToolUIPart,
  type UIMessage,
} from "ai";
import { Suspense, lazy } from "react";
import { AttachmentView } from "./attachments";
import { record } from "./meta";
import { Readable, ToolCall } from "./toolViews";

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
  const running = !status || tone(status) === "pending";
  return (
    <details
      className="activity"
      data-testid="agent-activity"
      data-agent={agent}
      data-status={status ?? ""}
      aria-label={`Delegation to ${agent}`}
      open={running || undefined}
    >
      <summary className="activity-head">
        <span aria-hidden="true" className="activity-icon">↳</span>
        <span className="activity-agent">{agent}</span>
        {status ? <span className={`badge ${tone(status)}`}>{status}</span> : null}
        {iteration ? <span className="muted">iteration {iteration}</span> : null}
        {model ? <span className="muted">{model}</span> : null}
        {duration ? <span className="muted">{duration}</span> : null}
      </summary>
      <div className="activity-body">
        {text ? <p className="activity-text">{text}</p> : null}
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
        {rest.length ? <Readable value={Object.fromEntries(rest)} /> : null}
      </div>
    </details>
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
        if (isFileUIPart(part)) return <AttachmentView key={key} part={part} />;
        if (isDataUIPart(part) && part.type === "data-agentActivity") return <AgentActivity key={key} data={part.data} />;
        return null;
      })}
    </>
  );
}
