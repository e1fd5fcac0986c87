// The API key: asked for once when the API answers 401, kept for this browser
// (localStorage, shared by its tabs), sent as `x-popagent-key` on every /api request.
// Settings → This browser changes or forgets it.

const STORAGE_KEY = "popagent.apiKey";
export const KEY_HEADER = "x-popagent-key";

/** Shows the key dialog; resolves with what the user typed. `rejected`: the last key was refused. */
export type KeyPrompt = (rejected: boolean) => Promise<string>;

let prompt: KeyPrompt | null = null;
let pending: Promise<void> | null = null;

export function storedKey(): string | null {
  try {
    return localStorage.getItem(STORAGE_KEY);
  } catch {
    return null;
  }
}

/** Keeps `key` for this browser; an empty key forgets it (the next request asks again). */
export function storeKey(key: string): void {
  if (key) localStorage.setItem(STORAGE_KEY, key);
  else localStorage.removeItem(STORAGE_KEY);
}

export function installKeyPrompt(fn: KeyPrompt | null): void {
  prompt = fn;
}

/** One prompt at a time: every request that got a 401 meanwhile waits for the same answer. */
function obtainKey(rejected: boolean): Promise<void> {
  if (!pending) {
    if (!prompt) return Promise.reject(new Error("the API needs a key and no prompt is mounted"));
    pending = prompt(rejected)
      .then((key) => {
        storeKey(key);
      })
      .finally(() => {
        pending = null;
      });
  }
  return pending;
}

/** fetch for /api: adds the key, and on 401 asks for it and retries with the answer. A `Request`
 * (what the typed client passes) is cloned for each try, since a try consumes its body. */
export async function authedFetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
  for (;;) {
    const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
    const sent = storedKey();
    if (sent) headers.set(KEY_HEADER, sent);
    const response = await fetch(input instanceof Request ? input.clone() : input, { ...init, headers });
    if (response.status !== 401) return response;
    // Another request may have obtained a new key while this one was in flight.
    if (storedKey() !== sent) continue;
    await obtainKey(sent !== null);
  }
}
