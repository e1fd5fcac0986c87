// Resumes a session's running turn with the real AI SDK client, as `useChat({ resume: true })`
// does on mount: a fresh Chat (no messages) calls `resumeStream()`, whose DefaultChatTransport
// GETs `${api}/${chatId}/stream` (204: nothing runs, the chat stays empty and ready; 200: the
// running turn's stream, replayed from its first chunk, then live to its end). Prints
// {status, errors, messages, requests} as JSON; `requests` lists each request the transport
// made, with the response's status.
//
// usage: node resume-client.mjs <ai package: ai5 | ai | ai7> <gatewayUrl> <apiKey> <sessionId>
//
// The three majors (tests/ai_sdk/package.json: `ai5` and `ai7` are npm aliases, `ai` is 6) were
// read in their dist/index.d.ts and dist/index.(m)js:
// - ChatState is the same shape in 5, 6 and 7 (7 adds an optional `experimental_queuedMessages`,
//   which a state may leave out: the chat then keeps its queue itself), so one State serves all.
// - `AbstractChat.resumeStream(options?)` exists in all three and makes a "resume-stream" request
//   through `transport.reconnectToStream({ chatId, ... })`.
// - DefaultChatTransport builds the reconnect URL the same way in all three (no
//   `prepareReconnectToStreamRequest` needed): `${api}/${encodeURIComponent(chatId)}/stream`, a GET
//   with the transport's headers; 204 resolves to no stream.
// - 6 and 7 add `resumeStreamIsReplay` (default true): the resumed stream starts over from the
//   response's first chunk, so the client resets the message it streams on that start chunk. That is
//   what the gateway sends without Last-Event-ID, so it is set to true. 5 has no such option (it
//   ignores it); its resume always streams into a new message state, which is the same here since the
//   chat starts empty.
import { chatClass, importAi, popagentHeaders, recordingFetch } from "./chat-state.mjs";

const [pkg, url, apiKey, sessionId] = process.argv.slice(2);
const { AbstractChat, DefaultChatTransport } = await importAi(pkg);

const Chat = chatClass(AbstractChat);

// The same settings as chat-client.mjs (a resume sends no body; the POST settings are there so the
// chat is the one the UI builds). The transport's headers go with the resume GET too, so ai 5's
// `x-popagent-ai-sdk` reaches the follow route without a `prepareReconnectToStreamRequest`.
const requests = [];
const transport = new DefaultChatTransport({
  api: `${url}/api/chat`,
  headers: popagentHeaders(pkg, apiKey),
  fetch: recordingFetch(requests),
  resumeStreamIsReplay: true,
  prepareSendMessagesRequest: ({ id, messages }) => ({
    body: { id, model: "fake/fake-chat", workspaceId: "popagent", message: messages[messages.length - 1] },
  }),
});

const errors = [];
const chat = new Chat({ id: sessionId, transport, onError: (error) => errors.push(String(error.message ?? error)) });
await chat.resumeStream();
process.stdout.write(JSON.stringify({ status: chat.status, errors, messages: chat.messages, requests }));
