// Answers a tool approval with the real AI SDK client, the AI SDK way (ai 6 and 7): a Chat with
// `sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses` sends a message; its
// stream ends where the turn waits for an approval (the tool part is `approval-requested`); the
// client answers with `addToolApprovalResponse({ id, approved, reason })`, which sends the assistant
// message back (POST /api/chat, the transport's body carries the last message), and that stream goes
// on with the rest of the turn into the same assistant message. Prints
// {status, errors, messages, requests, answered} as JSON once the chat is ready again.
//
// usage: node approval-client.mjs <ai package: ai | ai7> <gatewayUrl> <apiKey> <sessionId> <text> <approve|deny> [reason]
import { chatClass, importAi, popagentHeaders, recordingFetch } from "./chat-state.mjs";

const [pkg, url, apiKey, sessionId, text, decision, reason] = process.argv.slice(2);
const { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } = await importAi(
  pkg,
  ["ai", "ai7"],
);

const Chat = chatClass(AbstractChat);

const requests = [];
const transport = new DefaultChatTransport({
  api: `${url}/api/chat`,
  headers: popagentHeaders(pkg, apiKey),
  fetch: recordingFetch(requests),
  prepareSendMessagesRequest: ({ id, messages }) => ({
    body: { id, model: "fake/fake-chat", message: messages[messages.length - 1] },
  }),
});

const errors = [];
const chat = new Chat({
  id: sessionId,
  transport,
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onError: (error) => errors.push(String(error.message ?? error)),
});

function waiting() {
  const last = chat.messages[chat.messages.length - 1];
  return last?.parts.find((part) => part.state === "approval-requested");
}

await chat.sendMessage({ text });
const asked = waiting();
let answered = null;
if (asked) {
  answered = { toolCallId: asked.toolCallId, approvalId: asked.approval.id };
  await chat.addToolApprovalResponse({ id: asked.approval.id, approved: decision === "approve", reason });
  // The answer's request runs in the background: wait until the chat is ready again.
  const deadline = Date.now() + 30000;
  while ((chat.status !== "ready" || requests.length < 2) && chat.status !== "error" && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
process.stdout.write(JSON.stringify({ status: chat.status, errors, messages: chat.messages, requests, answered }));
