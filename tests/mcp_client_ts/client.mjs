// Drives popagent's MCP server at /mcp with the official MCP TypeScript SDK client (Client over
// StreamableHTTPClientTransport, sending `headers` on every request): connects, lists the tools and,
// given a prompt, calls `chat` collecting its progress notifications, then `get_session` on the session
// it answered in. Prints {connected, tools, chat, progress, session} as JSON; a refused connection
// prints {connected: false, status, error, tools: null} (status: the HTTP status the SDK reports).
//
// usage: node client.mjs <gatewayUrl> <headers as JSON> [<prompt> <model>]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, headersJson, prompt, model] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
  requestInit: { headers: JSON.parse(headersJson) },
});
const client = new Client({ name: "popagent-ts-test", version: "1.0.0" });

const print = (value) => process.stdout.write(JSON.stringify(value));
const textOf = (result) => result.content.map((part) => part.text ?? "").join("");

try {
  await client.connect(transport);
} catch (error) {
  print({
    connected: false,
    status: error instanceof StreamableHTTPError ? error.code : null,
    error: String(error.message ?? error),
    tools: null,
  });
  process.exit(0);
}

const tools = (await client.listTools()).tools.map((tool) => tool.name);
const outcome = { connected: true, tools };
if (prompt) {
  const progress = [];
  const chat = await client.callTool({ name: "chat", arguments: { prompt, model } }, undefined, {
    onprogress: ({ progress: value, message }) => progress.push({ progress: value, message }),
    timeout: 60_000,
  });
  outcome.chat = { isError: Boolean(chat.isError), text: textOf(chat) };
  outcome.progress = progress;
  if (!chat.isError) {
    const { sessionId } = JSON.parse(textOf(chat));
    const session = await client.callTool({ name: "get_session", arguments: { session_id: sessionId } });
    outcome.session = { isError: Boolean(session.isError), text: textOf(session) };
  }
}
await client.close();
print(outcome);
