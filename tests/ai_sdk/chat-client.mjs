// Drives popagent's POST /api/chat with the real AI SDK client (the Chat class that React's useChat
// wraps) of one `ai` major, using a transport that posts only the session id, model, workspace and
// newest message. Prints {status, errors, messages, requests} as JSON once the message's stream ended.
//
// usage: node chat-client.mjs <gatewayUrl> <apiKey> <sessionId> <text> [<ai package: ai5 | ai | ai7> [workspaceId]]
// (default: ai (6) and the workspace `popagent`; an empty workspaceId sends none: the session's own)
import { chatClass, importAi, popagentHeaders, recordingFetch } from "./chat-state.mjs";

const [url, apiKey, sessionId, text, pkg = "ai", workspaceId = "popagent"] = process.argv.slice(2);
const { AbstractChat, DefaultChatTransport } = await importAi(pkg);

const Chat = chatClass(AbstractChat);

const requests = [];
const transport = new DefaultChatTransport({
  api: `${url}/api/chat`,
  headers: popagentHeaders(pkg, apiKey),
  fetch: recordingFetch(requests),
  prepareSendMessagesRequest: ({ id, messages }) => ({
    body: { id, model: "fake/fake-chat", ...(workspaceId ? { workspaceId } : {}), message: messages[messages.length - 1] },
  }),
});

const errors = [];
const chat = new Chat({ id: sessionId, transport, onError: (error) => errors.push(String(error.message ?? error)) });
await chat.sendMessage({ text });
process.stdout.write(JSON.stringify({ status: chat.status, errors, messages: chat.messages, requests }));
