// What the test clients share: the AI SDK's AbstractChat (what React's useChat wraps) over a plain
// in-memory state, for whichever `ai` major the client imported (ChatState is the same shape in 5, 6
// and 7; 7's optional `experimental_queuedMessages` may be left out); the package of each major
// (tests/ai_sdk/package.json: `ai5` and `ai7` are npm aliases, `ai` is 6); the headers a popagent
// transport sends; and a fetch that records each request the transport made.
class State {
  constructor() { this.messages = []; this.status = "ready"; this.error = undefined; }
  pushMessage(message) { this.messages = this.messages.concat(message); }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(index, message) { this.messages = this.messages.map((m, i) => (i === index ? message : m)); }
  snapshot(value) { return structuredClone(value); }
}

export function chatClass(AbstractChat) {
  return class Chat extends AbstractChat {
    constructor(init) { super({ ...init, state: new State() }); }
  };
}

const MAJORS = { ai5: "5", ai: "6", ai7: "7" };

// The `ai` package a client was asked for, imported; a package outside `allowed` ends the process
// (exit 2) before anything is sent.
export async function importAi(pkg, allowed = Object.keys(MAJORS)) {
  if (!allowed.includes(pkg)) {
    process.stderr.write(`unknown ai package ${pkg}: one of ${allowed.join(", ")}\n`);
    process.exit(2);
  }
  return import(pkg);
}

// The transport's headers, which DefaultChatTransport sends on POST /api/chat and on the resume GET
// alike: the key, and the client's AI SDK major (`x-popagent-ai-sdk`), which the AI SDK does not send
// itself and ai 5 needs the gateway to know (docs/approvals.md). `ai` (6) sends none, as an
// application that never heard of the header does: the gateway's default.
export function popagentHeaders(pkg, apiKey) {
  return { "x-popagent-key": apiKey, ...(pkg === "ai" ? {} : { "x-popagent-ai-sdk": MAJORS[pkg] }) };
}

// A fetch for the transport that lists each request it made: method, url, the response's status and
// the role of the message a POST carried.
export function recordingFetch(requests) {
  return async (input, init) => {
    const response = await fetch(input, init);
    const body = init?.body ? JSON.parse(init.body) : undefined;
    const role = body?.message?.role;
    requests.push({ method: init?.method ?? "GET", url: String(input), status: response.status, ...(role ? { role } : {}) });
    return response;
  };
}
