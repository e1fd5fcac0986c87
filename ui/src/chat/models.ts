// Which catalog models the chat offers, and the model each chat last used.
// The model gateway's catalog carries no model kind, so models that are not for chat
// (embedding, rerank) are recognised by their id: a per-browser setting lists the words
// (Settings → This browser; default "embed, rerank").
import type { ModelsOut } from "../api/types";

const NON_CHAT_KEY = "popagent.nonChatModelWords";
export const DEFAULT_NON_CHAT_WORDS = "embed, rerank";

export function nonChatWords(): string {
  try {
    return localStorage.getItem(NON_CHAT_KEY) ?? DEFAULT_NON_CHAT_WORDS;
  } catch {
    return DEFAULT_NON_CHAT_WORDS;
  }
}

export function setNonChatWords(words: string): void {
  localStorage.setItem(NON_CHAT_KEY, words);
}

function words(text: string): string[] {
  return text
    .split(/[,\s]+/)
    .map((word) => word.trim().toLowerCase())
    .filter(Boolean);
}

/** Whether `model` is for chat: its id has none of the setting's words. */
export function isChatModel(model: string, setting = nonChatWords()): boolean {
  const id = model.toLowerCase();
  return !words(setting).some((word) => id.includes(word));
}

/** The catalog's chat models, in its order. */
export function chatModels(models: ModelsOut | undefined): string[] {
  const setting = nonChatWords();
  return (models?.models ?? []).filter((model) => isChatModel(model, setting));
}

const SESSION_MODEL_PREFIX = "popagent.sessionModel.";

/** The model this browser last sent a turn of `sessionId` with. */
export function rememberedModel(sessionId: string): string | null {
  try {
    return localStorage.getItem(SESSION_MODEL_PREFIX + sessionId);
  } catch {
    return null;
  }
}

export function rememberModel(sessionId: string, model: string): void {
  try {
    if (model) localStorage.setItem(SESSION_MODEL_PREFIX + sessionId, model);
  } catch {
    // storage full or off: the chat then opens on the current pick
  }
}
