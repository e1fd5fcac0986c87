// Drives popagent's POST /api/chat with the real AI SDK client (the Chat class that
// React's useChat wraps), using a transport that posts only the session id, model,
// workspace and newest message. Prints the reconstructed messages as JSON.
//
// usage: node chat-client.mjs <gatewayUrl> <apiKey> <sessionId> <text>
import { AbstractChat, DefaultChatTransport } from "ai";

const [url, apiKey, sessionId, text] = process.argv.slice(2);

class State {
  constructor() { this.messages = []; this.status = "ready"; this.error = undefined; }
  pushMessage(message) { this.messages = this.messages.concat(message); }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(index, message) { this.messages = this.messages.map((m, i) => (i === index ? message : m)); }
  snapshot(value) { return structuredClone(value); }
}

class Chat extends AbstractChat {
  constructor(init) { super({ ...init, state: new State() }); }
}

const transport = new DefaultChatTransport({
  api: `${url}/api/chat`,
  headers: { "x-popagent-key": apiKey },
  prepareSendMessagesRequest: ({ id, messages }) => ({
    body: { id, model: "fake/fake-chat", workspaceId: "popagent", message: messages[messages.length - 1] },
  }),
});

const errors = [];
const chat = new Chat({ id: sessionId, transport, onError: (error) => errors.push(String(error.message ?? error)) });
await chat.sendMessage({ text });
process.stdout.write(JSON.stringify({ status: chat.status, errors, messages: chat.messages }));
