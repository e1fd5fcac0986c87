// Reading what the chat stream attaches to assistant messages: the start chunk's
// `messageMetadata` ({turnId, model}) merged with the finish chunk's ({turnId, usage}).
// The stream is the AI SDK UI message protocol, not an OpenAPI body, so it is read
// defensively here instead of being typed as a DTO.
import type { UIMessage } from "ai";

function record(value: unknown): Record<string, unknown> {
  return value && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
}

export function turnIdOf(message: UIMessage): string | null {
  const id = record(message.metadata).turnId;
  return typeof id === "string" && id ? id : null;
}

/** The turn's trace (the start chunk's metadata), for feedback and the trace page. */
export function traceIdOf(message: UIMessage): string | null {
  const id = record(message.metadata).traceId;
  return typeof id === "string" && id ? id : null;
}

export function modelOf(message: UIMessage): string | null {
  const model = record(message.metadata).model;
  return typeof model === "string" && model ? model : null;
}

export function usageOf(message: UIMessage): { input: number; output: number } | null {
  const usage = record(record(message.metadata).usage);
  const input = usage.inputTokens;
  const output = usage.outputTokens;
  if (typeof input !== "number" && typeof output !== "number") return null;
  return { input: typeof input === "number" ? input : 0, output: typeof output === "number" ? output : 0 };
}

/** Set by this UI when the user stopped the turn (`stopped`), or by the server on a cancelled
 * turn's answer (`cancelled`: stopped, or interrupted by a newer message), so a reopened session says so. */
export function stoppedOf(message: UIMessage): boolean {
  const metadata = record(message.metadata);
  return metadata.stopped === true || metadata.cancelled === true;
}

/** Set by the server on an answer whose turn did not end (client gone, service stopped or
 * restarted): a reopened session shows that the answer is incomplete. */
export function interruptedOf(message: UIMessage): boolean {
  return record(message.metadata).interrupted === true;
}

/** Set by this UI (and by the server) when the turn ended with an error, so a reopened session still shows the reason. */
export function failureOf(message: UIMessage): string | null {
  const reason = record(message.metadata).failure;
  return typeof reason === "string" && reason ? sentence(reason) : null;
}

/** A reason as a sentence: capitalised, ending with a full stop. */
export function sentence(text: string): string {
  const trimmed = text.trim();
  if (!trimmed) return trimmed;
  const capital = trimmed.charAt(0).toUpperCase() + trimmed.slice(1);
  return /[.!?)]$/.test(capital) ? capital : `${capital}.`;
}

export function textOf(message: { parts: ReadonlyArray<{ type: string }> }): string {
  return message.parts
    .map((part) => (part.type === "text" && "text" in part && typeof part.text === "string" ? part.text : ""))
    .join("");
}

/** A session title from the first user message: one line, at most 60 characters. */
export function titleFrom(messages: ReadonlyArray<UIMessage>): string {
  const first = messages.find((message) => message.role === "user");
  const text = first ? textOf(first).replace(/\s+/g, " ").trim() : "";
  return text.length > 60 ? `${text.slice(0, 59)}…` : text;
}

/** The reason of a failed turn: the gateway's `{"error": ...}` body, or the stream's error text. */
export function reasonOfChatError(error: Error): string {
  const text = error.message.trim();
  try {
    const body: unknown = JSON.parse(text);
    const reason = record(body).error;
    if (typeof reason === "string" && reason) return sentence(reason);
  } catch {
    // not JSON: an error chunk's text, or a network error
  }
  return sentence(text || "the turn failed");
}

export { record };
