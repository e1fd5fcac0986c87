// Drives popagent's web UI in the system's headless Chromium (Debian's /usr/bin/chromium)
// with playwright-core from ui/node_modules, against a running stack. Started by
// test_browser.py, which owns the stack, the scripted model server and the hook receiver.
//
// usage: node browser.mjs <config.json>
//   config: {url, apiKey, outDir, denyReason, only?}
//   only: the names of the steps to run (the others are left out of the report); unset: all.
// Prints one JSON report on stdout: {steps: [{step, ok, ms, detail}]}; exits 1 when a step failed.
// Steps that need an earlier one are reported as failed ("not run: needs ...") when it failed,
// so every missing piece is named in one run.
import { readFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { checkAxeInBothSchemes, checkPageAxeInBothThemes } from "./driver.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(resolve(here, "../../ui/package.json"));
const { chromium } = require("playwright-core");

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
const { url, apiKey, outDir, denyReason, oauthMcpUrl } = config;
mkdirSync(outDir, { recursive: true });

const WIDE = { width: 1440, height: 900 };
const NARROW = { width: 375, height: 812 };
const PHONE = { width: 390, height: 844 };

const report = [];
const passed = new Set();

class StepFailed extends Error {}
// What a 501 / "Method not found!" means here: agent-runner does not serve AgentRunnerService.
const UNSERVED =
  " (agent-runner serves no AgentRunnerService: the chat turn's ChatServicer, which also answers /api/memories, is not registered in its gRPC server)";
function check(condition, message) {
  if (!condition) throw new StepFailed(message);
}

async function apiGet(path) {
  const response = await fetch(`${url}${path}`, { headers: { "x-popagent-key": apiKey } });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

function formatTokens(tokens) {
  if (tokens >= 1_000_000) return `${+(tokens / 1_000_000).toFixed(2)}M`;
  if (tokens >= 1_000) return `${+(tokens / 1_000).toFixed(1)}K`;
  return String(tokens);
}

const browser = await chromium.launch({
  executablePath: process.env.POPAGENT_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
const context = await browser.newContext({ viewport: WIDE });
const page = await context.newPage();
const consoleErrors = [];
const outsideRequests = [];
page.on("pageerror", (error) => consoleErrors.push(`pageerror: ${error.message}`));
// The gateway's Content-Security-Policy: anything the built UI needs and the policy refuses fails the run.
page.on("console", (message) => {
  if (message.type() === "error" && /Content Security Policy/i.test(message.text())) {
    consoleErrors.push(`csp: ${message.text()}`);
  }
});
const chatStatuses = [];
// Every 409 the page is answered (the console shows each): a normal turn causes none.
const conflictAnswers = [];
page.on("response", (response) => {
  if (new URL(response.url()).pathname === "/api/chat") chatStatuses.push(response.status());
  if (response.status() === 409) conflictAnswers.push(`${response.request().method()} ${new URL(response.url()).pathname}`);
});
page.on("request", (request) => {
  // A blob: URL of this origin is bytes the page already fetched from the server (an attachment's thumbnail).
  const local = request.url().startsWith("data:") || request.url().startsWith(`blob:${url}/`);
  if (!request.url().startsWith(url) && !local) outsideRequests.push(request.url());
});

async function step(name, needs, run) {
  if (config.only && !config.only.includes(name)) return;
  const missing = needs.filter((need) => !passed.has(need));
  if (missing.length) {
    report.push({ step: name, ok: false, ms: 0, detail: `not run: needs ${missing.join(", ")}` });
    return;
  }
  const started = Date.now();
  try {
    const detail = await run();
    passed.add(name);
    report.push({ step: name, ok: true, ms: Date.now() - started, detail: detail ?? "" });
  } catch (error) {
    const text = String(error?.message ?? error).split("\n").slice(0, 8).join("\n");
    report.push({ step: name, ok: false, ms: Date.now() - started, detail: text });
    await page.screenshot({ path: resolve(outDir, `failed-${name}.png`) }).catch(() => undefined);
  }
}

const composer = () => page.getByRole("textbox", { name: "Message", exact: true });
const assistants = () => page.locator('[data-testid="message-assistant"]');

/** The chat's status once the turn is over; a failed turn's reason shown by the UI becomes the error. */
async function waitTurnOver(timeout = 60_000, allowFailure = false) {
  await page.waitForFunction(
    () => {
      const status = document.querySelector('[data-testid="chat-status"]')?.getAttribute("data-status");
      return status === "ready" || status === "error";
    },
    null,
    { timeout },
  );
  const record = assistants().last().locator('[data-testid="message-failure"]');
  if (!allowFailure && (await record.count())) {
    const status = chatStatuses[chatStatuses.length - 1];
    throw new StepFailed(`the turn failed: "${(await record.innerText()).trim()}"; POST /api/chat answered HTTP ${status}`);
  }
  const shown = page.locator('[data-testid="chat-error"]');
  if (!allowFailure && (await shown.count())) {
    const status = chatStatuses[chatStatuses.length - 1];
    const hint = status === 501 ? UNSERVED : "";
    const reason = (await shown.locator('[data-testid="chat-error-reason"]').innerText()).trim();
    throw new StepFailed(`the UI shows a failed turn: "${reason}"; POST /api/chat answered HTTP ${status}${hint}`);
  }
}

async function waitSaved() {
  await page.waitForFunction(
    () => {
      const state = document.querySelector('[data-testid="save-state"]')?.getAttribute("data-state");
      return state === "saved" || state === "failed";
    },
    null,
    { timeout: 15_000 },
  );
  const state = await page.locator('[data-testid="save-state"]').getAttribute("data-state");
  check(state === "saved", `the session was not saved: ${await page.locator('[data-testid="save-state"]').innerText()}`);
}

async function send(text) {
  await composer().fill(text);
  await composer().press("Enter");
}

function currentSessionId() {
  const match = /#\/chat\/(.+)$/.exec(page.url());
  return match ? decodeURIComponent(match[1]) : null;
}

let chatSessionId = null;
let doubleTextSessionId = null;

/** New chat, then a first message: the session exists from then on. Its id. */
async function newSession(text) {
  if (!(await page.getByRole("button", { name: "New chat" }).isVisible())) {
    await page.goto(`${url}/#/chat`);
  }
  await page.getByRole("button", { name: "New chat" }).click();
  await page.waitForFunction(() => location.hash === "#/chat");
  const before = page.url();
  await send(text);
  await page.waitForFunction((previous) => /#\/chat\/.+/.test(location.hash) && location.href !== previous, before, { timeout: 15_000 });
  await waitTurnOver();
  await waitSaved();
  return currentSessionId();
}

/** Opens a session's action menu (shown on hover or focus) and picks `name`. */
async function menuAction(item, name) {
  await item.hover();
  await item.locator('[data-testid="session-menu"]').click();
  await page.getByRole("menuitem", { name }).click();
}

try {
  await step("api key prompt", [], async () => {
    await page.goto(url);
    const dialog = page.getByRole("dialog", { name: "API key needed" });
    await dialog.waitFor({ timeout: 15_000 });
    await dialog.getByRole("textbox", { name: "API key" }).fill(apiKey);
    await dialog.getByRole("button", { name: "Use this key" }).click();
    await dialog.waitFor({ state: "hidden" });
    const stored = await page.evaluate(() => localStorage.getItem("popagent.apiKey"));
    check(stored === apiKey, "the key is not kept in localStorage (per browser)");
    // Every /api request now carries it: the sessions list loads without another prompt.
    await page.locator('[data-testid="session-list"]').waitFor();
    return "asked once, kept for the browser";
  });

  await step("first-use model pick", ["api key prompt"], async () => {
    const { body: before } = await apiGet("/api/models");
    check(before.defaultModelListed === false, `the catalog lists the default ${before.defaultModel}: not a first use`);
    check(
      before.unlistedModels.some((entry) => entry.setting === "defaultModel" && entry.model === before.defaultModel),
      "GET /api/models does not name the unlisted default",
    );
    const notice = page.locator('[data-testid="default-model-notice"]');
    await notice.waitFor({ timeout: 10_000 });
    const said = await notice.innerText();
    check(said.includes(before.defaultModel) && /not offered/.test(said), `the notice says "${said}"`);
    // The picker opens on a listed model, not on the unlisted default.
    const picked = await page.locator('[data-testid="model-picker"]').inputValue();
    check(before.models.includes(picked), `the picker opened on ${picked}, which the catalog does not list`);
    await page.screenshot({ path: resolve(outDir, "first-use-1440.png") });
    // The first message goes out with the picked model and is answered.
    check(new URL(page.url()).hash === "" || new URL(page.url()).hash === "#/chat", `the first page is ${page.url()}`);
    await send("Hello popagent, this is my first message.");
    await page.waitForFunction(() => /#\/chat\/.+/.test(location.hash), null, { timeout: 15_000 });
    chatSessionId = currentSessionId();
    await waitTurnOver();
    const first = await assistants().last().innerText();
    check(first.includes("Hello from the scripted model"), `the first answer is "${first.slice(0, 120)}"`);
    await waitSaved();
    await page.screenshot({ path: resolve(outDir, "first-message-1440.png") });
    await page.locator('[data-testid="save-default-model"]').click();
    await notice.waitFor({ state: "detached", timeout: 10_000 });
    const { body: after } = await apiGet("/api/models");
    check(after.defaultModel === picked && after.defaultModelListed, `the default is ${after.defaultModel} after saving ${picked}`);
    return `default ${before.defaultModel} not offered; first message answered with ${picked}, saved as the default in one click`;
  });

  await step("model picker", ["first-use model pick"], async () => {
    const { body: models } = await apiGet("/api/models");
    check(models.models.length > 0, "GET /api/models lists no model");
    const picker = page.locator('[data-testid="model-picker"]');
    await page.waitForFunction(
      (expected) => document.querySelector('[data-testid="model-picker"]')?.value === expected,
      models.defaultModel,
      { timeout: 10_000 },
    );
    const options = await picker.locator("option").evaluateAll((nodes) => nodes.map((node) => node.value));
    for (const model of models.models.filter((id) => !/embed|rerank/i.test(id))) check(options.includes(model), `model ${model} is not offered`);
    const window = models.contextWindows[models.defaultModel];
    const shown = await page.locator('[data-testid="context-window"]').innerText();
    if (window) check(shown === `${formatTokens(window)} context`, `context window shown as "${shown}", expected ${window} tokens`);
    return `default ${models.defaultModel} preselected, ${shown}`;
  });

  await step("streamed text", ["first-use model pick"], async () => {
    check(chatSessionId, "no session from the first message");
    // Shift+Enter is a new line, not a send.
    await composer().fill("line one");
    await composer().press("Shift+Enter");
    await composer().pressSequentially("line two");
    check((await composer().inputValue()) === "line one\nline two", "Shift+Enter did not add a line");
    check((await page.locator('[data-testid^="message-user"]').count()) === 1, "Shift+Enter sent the message");
    await page.evaluate(() => {
      const log = document.querySelector('[role="log"]');
      const box = () => document.querySelector(".composer")?.getBoundingClientRect().top ?? -1;
      window.__seen = { texts: [], composerTops: [box()] };
      window.__observer = new MutationObserver(() => {
        const all = document.querySelectorAll('[data-testid="message-assistant"]');
        const last = all[all.length - 1];
        if (last) {
          const text = [...last.querySelectorAll('[data-testid="message-text"]')].map((node) => node.textContent).join("");
          const texts = window.__seen.texts;
          if (text && texts[texts.length - 1] !== text) texts.push(text);
        }
        window.__seen.composerTops.push(box());
      });
      window.__observer.observe(log, { subtree: true, childList: true, characterData: true });
    });
    const conflictsBefore = conflictAnswers.length;
    await send("Hello popagent, stream me an answer.");
    check(await composer().evaluate((node) => node === document.activeElement), "focus left the message box after sending");
    await waitTurnOver();
    const seen = await page.evaluate(() => {
      window.__observer.disconnect();
      return window.__seen;
    });
    const final = seen.texts[seen.texts.length - 1] ?? "";
    check(final.startsWith("Hello from the scripted model"), `final text is "${final.slice(0, 80)}"`);
    const pieces = seen.texts.filter((text) => text !== final);
    check(pieces.length >= 3, `the answer arrived in ${pieces.length + 1} piece(s), expected it to grow at least 3 times`);
    check(pieces.every((text) => final.startsWith(text)), "a streamed piece is not a prefix of the final text");
    const tops = new Set(seen.composerTops.map((top) => Math.round(top)));
    check(tops.size === 1, `the message box moved while streaming (tops ${[...tops].join(", ")})`);
    await waitSaved();
    // The server stores the turn; the page writes nothing back over it.
    check(conflictAnswers.length === conflictsBefore, `a normal turn was answered 409: ${conflictAnswers.slice(conflictsBefore).join(", ")}`);
    return `${pieces.length + 1} pieces, composer fixed at y=${[...tops][0]}`;
  });

  await step("chat exported", ["streamed text"], async () => {
    const menu = page.locator("details.export-menu");
    await menu.locator("summary").click();
    const [markdown] = await Promise.all([
      page.waitForEvent("download"),
      menu.getByRole("button", { name: "Markdown (.md)" }).click(),
    ]);
    check(markdown.suggestedFilename().endsWith(".md"), `the download is named ${markdown.suggestedFilename()}`);
    const text = readFileSync(await markdown.path(), "utf8");
    check(text.includes("## User") && text.includes("Hello popagent, stream me an answer."), "the export lacks the question");
    check(text.includes("## popagent") && text.includes("Hello from the scripted model"), "the export lacks the answer");
    const [json] = await Promise.all([page.waitForEvent("download"), menu.getByRole("button", { name: "JSON (.json)" }).click()]);
    const session = JSON.parse(readFileSync(await json.path(), "utf8"));
    check(session.id === chatSessionId && session.messages.length >= 2, "the JSON export is not this session");
    await menu.locator("summary").click();
    return `${markdown.suggestedFilename()} (${text.length} characters) and ${json.suggestedFilename()}`;
  });

  await step("file attached", ["streamed text"], async () => {
    // A 1x1 PNG and a CSV, chosen with the attach button: uploaded at once, shown as chips before sending.
    const png = Buffer.from(
      "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC",
      "base64",
    );
    await page.locator('[data-testid="attach-input"]').setInputFiles([
      { name: "rainfall.csv", mimeType: "text/csv", buffer: Buffer.from("city,days\nOslo,12\nBergen,31\nBodo,20\n") },
      { name: "pixel.png", mimeType: "image/png", buffer: png },
      { name: "stray.txt", mimeType: "text/plain", buffer: Buffer.from("to be removed") },
    ]);
    const chips = page.locator('[data-testid="attachment-chip"]');
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="attachment-chip"]').length === 3, null, { timeout: 15_000 });
    await page.getByRole("button", { name: "Remove stray.txt" }).click();
    check((await chips.count()) === 2, "removing a chip left it attached");
    await send("Which city in the attached file is the wettest?");
    await waitTurnOver();
    const answer = (await assistants().last().innerText()).trim();
    check(answer.includes("From rainfall.csv: Bergen is the wettest, with 31 days"), `the model did not read the file: "${answer.slice(0, 120)}"`);
    check((await chips.count()) === 0, "the chips stayed after sending");
    // The sent message shows its files: the image as a thumbnail, each with download and copy actions.
    const sent = page.locator('[data-testid^="message-user"]').last();
    await sent.locator('[data-testid="attachment"][data-filename="rainfall.csv"]').waitFor({ timeout: 10_000 });
    const thumb = sent.locator('[data-testid="attachment"][data-filename="pixel.png"] img.attachment-thumb');
    await thumb.waitFor({ timeout: 10_000 });
    check((await thumb.getAttribute("src"))?.startsWith("blob:"), "the thumbnail is not the downloaded image");
    check((await sent.locator('[data-filename="stray.txt"]').count()) === 0, "the removed file was sent");
    const [download] = await Promise.all([
      page.waitForEvent("download"),
      sent.locator('[data-filename="rainfall.csv"]').getByRole("button", { name: "Download" }).click(),
    ]);
    check(readFileSync(await download.path(), "utf8").includes("Bergen,31"), "the download is not the attached file");
    await sent.locator('[data-filename="rainfall.csv"] [data-testid="copy-to-workspace"]').click();
    const note = sent.locator('[data-filename="rainfall.csv"] .attachment-note');
    await page.waitForFunction(
      () => /Copied to|Not copied/.test(document.querySelector('[data-filename="rainfall.csv"] .attachment-note')?.textContent ?? ""),
      null,
      { timeout: 10_000 },
    );
    const { body: stored } = await apiGet(`/api/sessions/${encodeURIComponent(chatSessionId)}`);
    const files = stored.messages.flatMap((message) => message.parts.filter((part) => part.type === "file"));
    check(files.map((file) => file.filename).join(",") === "rainfall.csv,pixel.png", `stored file parts: ${JSON.stringify(files)}`);
    return `answer "${answer.slice(0, 60)}", copy: ${(await note.innerText()).trim()}`;
  });

  await step("file attached to a new chat", ["file attached"], async () => {
    // The first attachment creates the chat's session; the first message carries the file.
    await page.getByRole("button", { name: "New chat" }).click();
    await page.waitForFunction(() => location.hash === "#/chat", null, { timeout: 10_000 });
    await page.locator('[data-testid="attach-input"]').setInputFiles([
      { name: "rainfall.csv", mimeType: "text/csv", buffer: Buffer.from("city,days\nLima,1\nCali,40\n") },
    ]);
    await page.locator('[data-testid="attachment-chip"]').waitFor({ timeout: 15_000 });
    await send("Which city in the attached file is the wettest?");
    await page.waitForFunction(
      (first) => /#\/chat\/.+/.test(location.hash) && location.hash !== `#/chat/${encodeURIComponent(first)}`,
      chatSessionId,
      { timeout: 15_000 },
    );
    await assistants().first().waitFor({ timeout: 15_000 });
    await waitTurnOver();
    const answer = (await assistants().last().innerText()).trim();
    check(answer.includes("From rainfall.csv: Cali is the wettest, with 40 days"), `the model did not read the file: "${answer.slice(0, 120)}"`);
    await page.locator('[data-testid^="message-user"] [data-testid="attachment"][data-filename="rainfall.csv"]').waitFor();
    const opened = new URL(page.url()).hash;
    await page.goto(`${url}/#/chat/${encodeURIComponent(chatSessionId)}`);
    await assistants().first().waitFor({ timeout: 15_000 });
    return `answer "${answer.slice(0, 60)}" in ${opened}`;
  });

  await step("empty new chat not persisted", ["streamed text"], async () => {
    const { body: before } = await apiGet("/api/sessions");
    await page.getByRole("button", { name: "New chat" }).click();
    await page.waitForFunction(() => location.hash === "#/chat", null, { timeout: 10_000 });
    await composer().waitFor();
    await page.screenshot({ path: resolve(outDir, "new-chat-1440.png") });
    await page.reload();
    await page.locator('[data-testid="session-list"]').waitFor();
    const { body: after } = await apiGet("/api/sessions");
    check(after.sessions.length === before.sessions.length, `New chat stored a session (${before.sessions.length} -> ${after.sessions.length})`);
    await page.goto(`${url}/#/chat/${encodeURIComponent(chatSessionId)}`);
    await assistants().first().waitFor({ timeout: 15_000 });
    return `${after.sessions.length} sessions before and after New chat and a reload`;
  });

  await step("markdown answer", ["streamed text"], async () => {
    await send("Give me a markdown summary.");
    await waitTurnOver();
    const answer = assistants().last();
    const table = answer.locator('[data-testid="markdown"] table');
    await table.waitFor({ timeout: 10_000 });
    const headers = await table.locator("th").allInnerTexts();
    check(headers.join("|") === "tool|calls", `the table's headers are ${JSON.stringify(headers)}`);
    check((await table.locator("tbody tr").count()) === 2, "the table does not have 2 rows");
    const block = answer.locator('[data-testid="code-block"][data-language="python"]');
    await block.waitFor();
    await page.waitForFunction(
      () => document.querySelector('[data-testid="code-block"][data-language="python"]')?.getAttribute("data-highlighted") === "true",
      null,
      { timeout: 10_000 },
    );
    check((await block.locator(".hljs-keyword").count()) >= 2, "the python block has no highlighted keywords");
    check((await answer.locator('[data-testid="markdown"] strong').innerText()) === "bold", "**bold** did not render");
    const injected = await page.evaluate(() => window.__injected === true || document.querySelector('[data-testid="markdown"] script, [data-testid="markdown"] b') !== null);
    check(!injected, "raw HTML from the model was rendered");
    await block.getByRole("button", { name: "Copy code" }).click();
    await block.locator('[data-testid="copy"][data-state="copied"], [data-testid="copy"][data-state="failed"]').waitFor();
    await answer.scrollIntoViewIfNeeded();
    await page.screenshot({ path: resolve(outDir, "markdown-1440.png") });
    await waitSaved();
    return `table ${headers.join("|")}, python block highlighted (${await block.locator(".hljs-keyword").count()} keywords), raw HTML not rendered`;
  });

  await step("answer accessible in light and dark", ["markdown answer"], async () => {
    // The answer with its table, highlighted code and message actions, as a mouse user sees it
    // (the actions are dimmed until hover where a pointer can hover) and in both color schemes.
    await page.mouse.move(0, 0);
    await checkAxeInBothSchemes(page, '[data-testid="message-assistant"]');
    const codeSize = await assistants()
      .last()
      .locator('[data-testid="code-block"] code')
      .first()
      .evaluate((code) => parseFloat(getComputedStyle(code).fontSize));
    check(codeSize >= 12, `code in a block is ${codeSize} px`);
    return `no violation in light or dark; code at ${codeSize} px`;
  });

  await step("feedback and trace link", ["markdown answer"], async () => {
    const answer = assistants().filter({ has: page.locator('[data-testid="markdown"] table') }).last();
    const trace = answer.locator('[data-testid="trace-link"]');
    const target = (await trace.getAttribute("href")) ?? "";
    check(/^#\/observability\/traces\/[0-9a-f]{32}$/.test(target), `the trace link is "${target}"`);
    await answer.hover();
    await answer.getByRole("button", { name: "Bad answer" }).click();
    await answer.getByRole("textbox", { name: "Comment (optional)" }).fill("The table was too short.");
    await answer.locator('[data-testid="feedback-send"]').click();
    const given = answer.locator('[data-testid="feedback-given"]');
    await given.waitFor({ timeout: 10_000 }).catch(() => undefined);
    if (!(await given.count())) {
      throw new StepFailed(`feedback was not saved: ${await answer.locator('[data-testid="feedback"]').innerText()}`);
    }
    const { status, body } = await apiGet(`/api/observability/feedback?sessionId=${encodeURIComponent(chatSessionId)}`);
    check(status === 200, `GET /api/observability/feedback answered ${status}`);
    const stored = body.feedback.find((item) => item.comment === "The table was too short.");
    check(stored && stored.rating === "down" && target.endsWith(stored.traceId), `the stored feedback is ${JSON.stringify(stored)}`);
    return `thumbs down with a comment stored for trace ${stored.traceId}`;
  });

  await step("failure then retry", ["streamed text"], async () => {
    const question = "Please fail once, then answer.";
    await send(question);
    await waitTurnOver(60_000, true);
    const failure = page.locator('[data-testid="message-failure"], [data-testid="chat-error"]');
    await failure.first().waitFor({ timeout: 15_000 });
    check((await failure.count()) === 1, `the error shows ${await failure.count()} times`);
    const said = await failure.first().innerText();
    check(!/\{|\}|Traceback|grpc/i.test(said), `the error is not in plain words: "${said}"`);
    await waitSaved();
    let { body: session } = await apiGet(`/api/sessions/${encodeURIComponent(chatSessionId)}`);
    const lastStored = session.messages[session.messages.length - 1];
    check(lastStored.role === "assistant" && lastStored.metadata?.failure, `the failed turn is not kept: last stored ${JSON.stringify(lastStored).slice(0, 200)}`);
    await page.screenshot({ path: resolve(outDir, "failure-1440.png") });
    await failure.first().getByRole("button", { name: "Retry" }).click();
    await waitTurnOver();
    const answer = await assistants().last().innerText();
    check(answer.includes("Second try worked."), `the retried answer is "${answer.slice(0, 120)}"`);
    check((await page.locator('[data-testid="message-failure"]').count()) === 0, "the failure is still shown after a successful retry");
    await waitSaved();
    ({ body: session } = await apiGet(`/api/sessions/${encodeURIComponent(chatSessionId)}`));
    const asked = session.messages.filter((message) => message.role === "user" && message.parts.some((part) => part.text === question));
    check(asked.length === 1, `the question is stored ${asked.length} times`);
    await page.screenshot({ path: resolve(outDir, "retry-1440.png") });
    return `"${said.replace(/\s+/g, " ").slice(0, 100)}" shown once, Retry answered, one user message stored`;
  });

  await step("refused turn kept", ["streamed text"], async () => {
    // The gateway refuses an unknown model before the turn starts (HTTP 400): the request's
    // model is rewritten on its way out, as a stale tab would send it.
    const rewrite = async (route) => {
      const body = JSON.parse(route.request().postData() ?? "{}");
      await route.continue({ postData: JSON.stringify({ ...body, model: "gone/model-no-longer-listed" }) });
    };
    await page.route("**/api/chat", rewrite);
    const question = "A question asked with a model the gateway no longer lists.";
    await send(question);
    await waitTurnOver(60_000, true);
    await page.unroute("**/api/chat", rewrite);
    const failure = page.locator('[data-testid="message-failure"], [data-testid="chat-error"]');
    await failure.first().waitFor({ timeout: 15_000 });
    check((await failure.count()) === 1, `the error shows ${await failure.count()} times`);
    const said = await failure.first().innerText();
    check(said.includes("gone/model-no-longer-listed"), `the refusal does not name the model: "${said}"`);
    await waitSaved();
    let { body: session } = await apiGet(`/api/sessions/${encodeURIComponent(chatSessionId)}`);
    const last = session.messages[session.messages.length - 1];
    check(last.role === "assistant" && last.metadata?.failure, `the refused question is left unanswered: ${JSON.stringify(last).slice(0, 200)}`);
    await page.screenshot({ path: resolve(outDir, "refused-1440.png") });
    await failure.first().getByRole("button", { name: "Retry" }).click();
    await waitTurnOver();
    await waitSaved();
    ({ body: session } = await apiGet(`/api/sessions/${encodeURIComponent(chatSessionId)}`));
    const asked = session.messages.filter((message) => message.role === "user" && message.parts.some((part) => part.text === question));
    check(asked.length === 1, `the question is stored ${asked.length} times`);
    const answer = session.messages[session.messages.length - 1];
    check(answer.role === "assistant" && !answer.metadata?.failure, "the retried turn is not answered");
    return `"${said.replace(/\s+/g, " ").slice(0, 120)}" kept as a failure record; Retry answered it`;
  });

  await step("edit and resend", ["streamed text"], async () => {
    await send("An original question to edit.");
    await waitTurnOver();
    await waitSaved();
    const lastUser = page.locator('[data-testid="message-user"]').last();
    await lastUser.hover();
    await lastUser.getByRole("button", { name: "Edit and resend" }).click();
    const box = lastUser.getByRole("textbox", { name: "Edited message" });
    await box.fill("The edited question, please.");
    await page.screenshot({ path: resolve(outDir, "edit-1440.png") });
    await lastUser.getByRole("button", { name: "Send" }).click();
    await waitTurnOver();
    const answer = await assistants().last().innerText();
    check(answer.includes("Answer to the edited question."), `the answer after editing is "${answer.slice(0, 120)}"`);
    await waitSaved();
    const { body: session } = await apiGet(`/api/sessions/${encodeURIComponent(chatSessionId)}`);
    const texts = session.messages.filter((message) => message.role === "user").map((message) => message.parts.map((part) => part.text ?? "").join(""));
    check(!texts.includes("An original question to edit."), "the original question is still stored");
    check(texts.filter((text) => text === "The edited question, please.").length === 1, `the edited question is stored ${texts.filter((text) => text === "The edited question, please.").length} times`);
    return "edited in place, answered, stored once in place of the original";
  });

  await step("message versions", ["streamed text"], async () => {
    try {
      return await messageVersions();
    } finally {
      // The steps after this one go on in the main chat.
      await page.goto(`${url}/#/chat/${encodeURIComponent(chatSessionId)}`);
      await assistants().first().waitFor({ timeout: 15_000 }).catch(() => undefined);
    }
  });


  async function messageVersions() {
    const sessionId = await newSession("Versions: the first question.");
    await send("Versions: a follow-up question.");
    await waitTurnOver();
    await waitSaved();
    const users = () => page.locator('[data-testid="message-user"]');
    const first = () => users().first();
    check((await users().count()) === 2, `${await users().count()} user messages before the edit`);
    // Any user message can be edited, not only the last one.
    await first().hover();
    await first().getByRole("button", { name: "Edit and resend" }).click();
    await first().getByRole("textbox", { name: "Edited message" }).fill("The edited question: versions.");
    await first().getByRole("button", { name: "Send" }).click();
    await waitTurnOver();
    const version = () => first().getByTestId("message-version");
    await page.waitForFunction(() => document.querySelector('[data-testid="message-version"]')?.textContent === "2/2", null, { timeout: 15_000 });
    check((await users().count()) === 1, `the edit left ${await users().count()} user messages (its branch starts at the edit)`);
    check((await assistants().last().innerText()).includes("Answer to the edited question."), "the edit was not answered");
    await page.screenshot({ path: resolve(outDir, "versions-2-of-2-1440.png") });
    // Back to the first version: the original question and everything that followed it.
    await first().getByRole("button", { name: "Previous version" }).click();
    await page.waitForFunction(() => document.querySelector('[data-testid="message-version"]')?.textContent === "1/2", null, { timeout: 15_000 });
    const original = async () => (await users().allInnerTexts()).join(" | ");
    check((await users().count()) === 2 && (await original()).includes("Versions: a follow-up question."), `version 1 shows: ${await original()}`);
    await page.screenshot({ path: resolve(outDir, "versions-1-of-2-1440.png") });
    // Kept on the server: a reload shows the same version, and the model's history is that branch's.
    await page.reload();
    await version().waitFor({ timeout: 15_000 });
    check((await version().innerText()) === "1/2", `after a reload the version shown is ${await version().innerText()}`);
    check((await users().count()) === 2, `after a reload ${await users().count()} user messages`);
    const { body: stored } = await apiGet(`/api/sessions/${encodeURIComponent(sessionId)}`);
    const kept = stored.messageVersions.find((entry) => entry.messageId === stored.messages[0].id);
    check(kept && kept.versions === 2 && kept.shown === 1, `the server keeps ${JSON.stringify(stored.messageVersions)}`);
    await first().hover();
    await first().getByRole("button", { name: "Next version" }).click();
    await page.waitForFunction(() => document.querySelector('[data-testid="message-version"]')?.textContent === "2/2", null, { timeout: 15_000 });
    check((await first().innerText()).includes("The edited question: versions."), "version 2 does not show the edit");
    // The branch goes on from the version shown.
    await send("Versions: after switching back.");
    await waitTurnOver();
    await waitSaved();
    check((await users().count()) === 2, `the branch has ${await users().count()} user messages after one more turn`);
    return "edit of the first message became version 2/2; 1/2 shows the original branch, kept through a reload; 2/2 goes on";
    }

  await step("generic tool view", ["streamed text"], async () => {
    await send("Please remember that I like green tea.");
    await waitTurnOver();
    const row = assistants().last().locator('[data-testid="tool-call"][data-tool="remember"]');
    await row.waitFor({ timeout: 10_000 });
    const summary = await row.locator("summary").innerText();
    check(summary.includes("The user likes green tea."), `the row says "${summary}"`);
    await row.locator("summary").click();
    const fields = row.locator(".readable-field");
    await fields.first().waitFor();
    const text = await row.locator(".tool-body").innerText();
    check(/stored\s+yes/i.test(text), `the result is not readable: "${text}"`);
    check(!text.includes("{"), `the result shows raw JSON: "${text}"`);
    await page.screenshot({ path: resolve(outDir, "tool-generic-1440.png") });
    await waitSaved();
    return summary.replace(/\s+/g, " ");
  });

  await step("workspace tools", ["streamed text"], async () => {
    await send("Fix the add function in the repository.");
    await waitTurnOver();
    const last = assistants().last();
    const read = (await last.locator('[data-testid="workspace-read"]').textContent()) ?? "";
    check(read.includes("calc.py · lines 1–2 of 2"), `the read shows "${read.slice(0, 80)}"`);
    const diff = (await last.locator('[data-testid="workspace-diff"]').textContent()) ?? "";
    check(diff.includes("-    return a - b") && diff.includes("+    return a + b"), `the edit's diff is "${diff.slice(0, 120)}"`);
    check((await last.locator(".diff-add").count()) >= 1, "the diff marks no added line");
    const command = last.locator('[data-testid="workspace-command"]');
    check(((await command.locator(".command-line").textContent()) ?? "").startsWith("$ python -c"), "the command line is not shown");
    check(((await command.locator('[data-testid="exit-code"]').textContent()) ?? "") === "exit 0", "the exit code is not exit 0");
    check(((await command.locator(".command-output pre").textContent()) ?? "").trim() === "5", "the command's output is not 5");
    const tree = await last.locator('[data-testid="workspace-tree"] li').allTextContents();
    check(tree.some((item) => item.startsWith("calc.py")), `the listing tree is ${JSON.stringify(tree)}`);
    await last.locator('[data-testid="tool-call"][data-tool="mastra_workspace_edit_file"] > summary').click();
    await last.locator('[data-testid="tool-call"][data-tool="mastra_workspace_execute_command"] > summary').click();
    await last.scrollIntoViewIfNeeded();
    await page.screenshot({ path: resolve(outDir, "tools-1440.png") });
    const header = (await page.locator('[data-testid="session-workspace"]').textContent()) ?? "";
    check(header.includes("popagent"), `the session header shows "${header}"`);
    await waitSaved();
    // The new-chat page (no session yet) lets the user pick the workspace.
    const back = new URL(page.url()).hash;
    await page.evaluate(() => {
      location.hash = "#/chat";
    });
    const pick = page.locator('[data-testid="new-session-workspace"]');
    await pick.waitFor();
    const options = await pick.locator("option").allTextContents();
    check(options.includes("popagent"), `the new-session workspace pick offers ${JSON.stringify(options)}`);
    await page.evaluate((hash) => {
      location.hash = hash;
    }, back);
    await page.locator('[data-testid="session-workspace"]').waitFor();
    return "read, diff, command and tree rendered; workspace pick offered";
  });

  await step("delegation", ["streamed text"], async () => {
    const before = await assistants().count();
    await send("Please delegate this to the researcher.");
    // Live: the activity shows while the turn runs.
    await page.locator('[data-testid="agent-activity"]').first().waitFor({ timeout: 30_000 });
    await waitTurnOver();
    check((await assistants().count()) === before + 1, "no new assistant message");
    const activity = assistants().last().locator('[data-testid="agent-activity"]');
    const text = await activity.first().innerText();
    check(/research/i.test(text), `the activity does not name the researcher: "${text}"`);
    const answer = await assistants().last().innerText();
    check(answer.includes("The researcher says the answer is 42."), `supervisor answer missing: "${answer.slice(0, 200)}"`);
    await assistants().last().scrollIntoViewIfNeeded();
    await page.screenshot({ path: resolve(outDir, "delegation-1440.png") });
    await waitSaved();
    return `activity: ${text.replace(/\s+/g, " ").slice(0, 80)}`;
  });

  await step("stop", ["streamed text"], async () => {
    await send("Write a very long slow answer.");
    const last = assistants().last();
    await page.waitForFunction(
      () => {
        const all = document.querySelectorAll('[data-testid="message-assistant"]');
        const text = all[all.length - 1]?.querySelector('[data-testid="message-text"]')?.textContent ?? "";
        return text.startsWith("Slow");
      },
      null,
      { timeout: 30_000 },
    );
    await page.locator('[data-testid="stop"]').click();
    await page.waitForFunction(() => document.querySelector('[data-testid="chat-status"]')?.getAttribute("data-status") === "ready", null, {
      timeout: 5_000,
    });
    const stopped = (await last.locator('[data-testid="message-text"]').innerText()).length;
    await page.waitForTimeout(1500);
    const later = (await last.locator('[data-testid="message-text"]').innerText()).length;
    check(later === stopped, `text kept growing after Stop (${stopped} -> ${later} characters)`);
    check(stopped < 2000, `the whole slow answer arrived (${stopped} characters) before Stop took effect`);
    await page.locator('[data-testid="send"]').waitFor();
    await waitSaved();
    return `stopped after ${stopped} characters`;
  });

  await step("hook timeline with a deny", ["streamed text"], async () => {
    await send("What time is it? Use the clock.");
    await waitTurnOver();
    const message = assistants().last();
    const answer = await message.innerText();
    check(answer.includes("blocked"), `the supervisor's answer does not report the block: "${answer.slice(0, 200)}"`);
    await message.locator('[data-testid="turn-hooks"] > summary').click();
    const deny = message.locator('[data-testid="hook-run"][data-outcome="deny"]');
    await deny.first().waitFor({ timeout: 10_000 });
    const row = await deny.first().innerText();
    check(row.includes(denyReason), `the deny row does not show the reason: "${row}"`);
    check(row.includes("PreToolUse"), `the deny row does not show the event: "${row}"`);
    // The session-wide timeline groups runs by turn; the deny turn is marked.
    await page.getByRole("button", { name: "Hook timeline" }).click();
    const panel = page.getByRole("complementary", { name: "Hook timeline" });
    const turnId = await message.getAttribute("data-turn-id");
    const group = panel.locator(`[data-testid="hook-turn"][data-turn-id="${turnId}"]`);
    await group.waitFor({ timeout: 10_000 });
    check((await group.locator("summary").innerText()).includes("deny"), "the turn's group is not marked as denied");
    await group.locator("summary").click();
    await group.locator('[data-testid="hook-run"][data-outcome="deny"]').first().waitFor();
    await page.screenshot({ path: resolve(outDir, "hooks-1440.png") });
    await page.getByRole("button", { name: "Hook timeline" }).click();
    return row.replace(/\s+/g, " ");
  });

  await step("web search results", ["streamed text"], async () => {
    await send("Search the web for PEP 8.");
    await waitTurnOver();
    const message = assistants().last();
    const results = message.locator('[data-testid="search-results"] [data-testid="search-result"]');
    await results.first().waitFor({ timeout: 10_000 });
    check((await results.count()) === 2, `expected 2 search results, got ${await results.count()}`);
    const link = results.first().getByRole("link", { name: "PEP 8 - Style Guide for Python Code" });
    check((await link.getAttribute("href")) === "https://peps.python.org/pep-0008/", "the result does not link to its page");
    const first = await results.first().innerText();
    check(first.includes("peps.python.org") && first.includes("2001-07-05"), `the result lacks its site or date: "${first}"`);
    check(first.includes("coding conventions"), `the result lacks its snippet: "${first}"`);
    check((await results.nth(1).getByRole("link").count()) === 0, "a javascript: result became a link");
    // Saved before the next step reads the server's copy.
    await waitSaved();
    return first.replace(/\s+/g, " ");
  });

  await step("fetched page", ["streamed text"], async () => {
    // The supervisor's membership gains webFetch (seeded for the researcher only); the next turn uses it.
    const patched = await fetch(`${url}/api/agents/popagent`, {
      method: "PATCH",
      headers: { "x-popagent-key": apiKey, "content-type": "application/json" },
      body: JSON.stringify({ tools: ["getTime", "remember", "webSearch", "webFetch"] }),
    });
    check(patched.status === 200, `adding webFetch to the supervisor answered ${patched.status}`);
    await send("Fetch the guide page.");
    await waitTurnOver();
    const view = assistants().last().locator('[data-testid="fetched-page"]');
    await view.waitFor({ timeout: 10_000 });
    check((await view.getByRole("link", { name: "Install guide" }).count()) === 1, "the page's title is not its link");
    const markdown = await view.locator("pre").innerText();
    check(markdown.includes("# Install") && markdown.includes("Run `make setup` first."), `the page's Markdown is not shown: "${markdown}"`);
    check(!markdown.includes("document.title"), "the page's script was shown");
    await waitSaved();
    return markdown.replace(/\s+/g, " ");
  });

  await step("a change from another tab shown after a turn", ["streamed text"], async () => {
    // Another tab saves first; this page's next turn shows the server's copy with that change and
    // the turn. The page writes nothing back (the server stored the turn), so nothing conflicts.
    const path = `/api/sessions/${encodeURIComponent(chatSessionId)}`;
    const { body: server } = await apiGet(path);
    const edited = { id: `edited-${Date.now()}`, role: "user", parts: [{ type: "text", text: "Edited in another tab." }] };
    const put = await fetch(`${url}${path}`, {
      method: "PUT",
      headers: { "x-popagent-key": apiKey, "content-type": "application/json" },
      body: JSON.stringify({ revision: server.revision, messages: [...server.messages, edited] }),
    });
    check(put.status === 200, `the other tab's save answered ${put.status}`);
    const conflictsBefore = conflictAnswers.length;
    await send("Hello again.");
    await waitTurnOver();
    await waitSaved();
    const users = await page.locator('[data-testid="message-user"]').allInnerTexts();
    const editedAt = users.findIndex((text) => text.includes("Edited in another tab."));
    const askedAt = users.findIndex((text) => text.includes("Hello again."));
    check(editedAt !== -1, "the other tab's change is not shown after the turn");
    check(askedAt > editedAt, "this turn's question is not shown after the other tab's change");
    check(conflictAnswers.length === conflictsBefore, `answered 409: ${conflictAnswers.slice(conflictsBefore).join(", ")}`);
    const { body: after } = await apiGet(path);
    const stored = after.messages.map((message) => message.parts.filter((part) => part.type === "text").map((part) => part.text).join(""));
    check(stored.includes("Edited in another tab.") && stored.includes("Hello again."), "the server's copy lost the change or the turn");
    return `the other tab's message and this turn shown from the server's copy (revision ${after.revision}), no 409`;
  });

  await step("reload keeps activity", ["delegation", "stop"], async () => {
    await page.reload();
    await assistants().first().waitFor({ timeout: 15_000 });
    check(!(await page.getByRole("dialog", { name: "API key needed" }).isVisible()), "the key was asked for again after a reload");
    const activities = page.locator('[data-testid="agent-activity"]');
    check((await activities.count()) >= 1, "no agent activity after reload");
    check(/research/i.test(await activities.first().innerText()), "the persisted activity does not name the researcher");
    const texts = await page.locator('[data-testid="message-assistant"] [data-testid="message-text"]').allInnerTexts();
    check(texts.some((text) => text.startsWith("Slow")), "the stopped turn's partial answer was not kept");
    check((await page.locator('[data-testid="message-stopped"]').count()) === 1, "the stopped turn is not marked as stopped");
    if (passed.has("web search results")) {
      check((await page.locator('[data-testid="search-result"]').count()) === 2, "the stored search results do not render after reload");
    }
    const { body: session } = await apiGet(`/api/sessions/${encodeURIComponent(chatSessionId)}`);
    const types = session.messages.flatMap((message) => message.parts.map((part) => part.type));
    check(types.includes("data-agentActivity"), "the stored session has no data-agentActivity part");
    return `${await activities.count()} activity part(s) after reload; session revision ${session.revision}`;
  });

  await step("reload mid-answer resumes", ["reload keeps activity"], async () => {
    // The turn runs on without its page; the reloaded page follows it (useChat resume: true) and
    // Stop then cancels it on the server.
    await send("Write one more slow answer.");
    const lastText = () => assistants().last().locator('[data-testid="message-text"]').innerText();
    await page.waitForFunction(
      () => {
        const all = document.querySelectorAll('[data-testid="message-assistant"]');
        return (all[all.length - 1]?.querySelector('[data-testid="message-text"]')?.textContent ?? "").startsWith("Slow");
      },
      null,
      { timeout: 30_000 },
    );
    await page.reload();
    await page.waitForFunction(() => document.querySelector('[data-testid="chat-status"]')?.getAttribute("data-status") === "streaming", null, {
      timeout: 15_000,
    });
    const resumed = (await lastText()).length;
    check(!(await assistants().last().locator('[data-testid="message-interrupted"]').count()), "the resumed answer is marked interrupted");
    await page.waitForTimeout(1000);
    const grown = (await lastText()).length;
    check((await lastText()).startsWith("Slow"), "the resumed answer does not start where the turn started");
    check(grown > resumed, `the resumed answer did not grow (${resumed} -> ${grown} characters)`);
    await page.locator('[data-testid="stop"]').click();
    await page.waitForFunction(() => document.querySelector('[data-testid="chat-status"]')?.getAttribute("data-status") === "ready", null, {
      timeout: 10_000,
    });
    const stopped = (await lastText()).length;
    await page.waitForTimeout(1500);
    check((await lastText()).length === stopped, "text kept growing after Stop on the resumed turn");
    await page.locator('[data-testid="send"]').waitFor();
    await waitSaved();
    return `resumed at ${resumed} characters, stopped at ${stopped}`;
  });

  await step("double texting: enqueue", ["streamed text"], async () => {
    const conflictsBefore = conflictAnswers.length;
    // The session's policy is picked in the chat's toolbar and saved on the server.
    const id = await newSession("Start the double texting chat.");
    const picker = page.getByLabel("During an answer");
    check((await picker.inputValue()) === "reject", `a new session's policy shows "${await picker.inputValue()}", not reject`);
    const patched = page.waitForResponse((response) => response.request().method() === "PATCH" && response.url().includes("/api/sessions/"));
    await picker.selectOption("enqueue");
    const patch = await patched;
    check(patch.status() === 200, `PATCH /api/sessions/{id} answered HTTP ${patch.status()}`);
    const { body: saved } = await apiGet(`/api/sessions/${encodeURIComponent(id)}`);
    check(saved.doubleTexting === "enqueue", `the session's doubleTexting is ${saved.doubleTexting} after picking enqueue`);
    const before = await assistants().count();
    // A second message while the first answer streams: queued, shown with its badge, then answered.
    await send("Double text first: a medium answer.");
    await page.waitForFunction(
      (count) => {
        const all = document.querySelectorAll('[data-testid="message-assistant"]');
        return all.length > count && (all[all.length - 1]?.querySelector('[data-testid="message-text"]')?.textContent ?? "").startsWith("First answer");
      },
      before,
      { timeout: 30_000 },
    );
    check(await page.locator('[data-testid="send"]').isVisible(), "no Send button while the answer streams under enqueue");
    await send("Double text second: queued after the first.");
    const queued = page.locator('[data-testid="queued-turn"]');
    await queued.locator('[data-testid="queued-badge"]', { hasText: /^queued/ }).waitFor({ timeout: 10_000 });
    const badge = (await queued.locator('[data-testid="queued-badge"]').innerText()).trim();
    check((await queued.innerText()).includes("Double text second"), `the queued bubble does not show the message: "${await queued.innerText()}"`);
    check(
      (await page.locator('[data-testid="chat-status"]').getAttribute("data-status")) === "streaming",
      "the first answer is no longer streaming when the second message shows as queued",
    );
    const { body: waiting } = await apiGet(`/api/sessions/${encodeURIComponent(id)}`);
    check(waiting.queuedTurns.length === 1, `GET /api/sessions/{id} lists ${waiting.queuedTurns.length} queued turns`);
    await page.screenshot({ path: resolve(outDir, "queued-1440.png") });
    // The first answer ends, the queued turn starts (its bubble leaves) and is answered after it.
    await queued.waitFor({ state: "detached", timeout: 60_000 });
    await page.waitForFunction(
      (count) => {
        const all = [...document.querySelectorAll('[data-testid="message-assistant"] [data-testid="message-text"]')].map((node) => node.textContent ?? "");
        const status = document.querySelector('[data-testid="chat-status"]')?.getAttribute("data-status");
        return all.length >= count + 2 && all[all.length - 1] === "Second answer from the queue." && status === "ready";
      },
      before,
      { timeout: 60_000 },
    );
    await waitTurnOver();
    await waitSaved();
    check(conflictAnswers.length === conflictsBefore, `answered 409: ${conflictAnswers.slice(conflictsBefore).join(", ")}`);
    const order = await page.locator('[data-testid="message-user"], [data-testid="message-assistant"]').allInnerTexts();
    const tail = order.slice(-4).map((text) => text.trim().split("\n")[0]);
    check(
      tail[0].startsWith("Double text first") && tail[1].startsWith("First answer") && tail[2].startsWith("Double text second") && tail[3].startsWith("Second answer"),
      `the conversation's last messages are out of order: ${JSON.stringify(tail)}`,
    );
    const { body: stored } = await apiGet(`/api/sessions/${encodeURIComponent(id)}`);
    const texts = stored.messages.slice(-4).map((message) => message.parts.filter((part) => part.type === "text").map((part) => part.text).join(""));
    check(
      texts[0].startsWith("Double text first") && texts[1].startsWith("First answer") && texts[2].startsWith("Double text second") && texts[3] === "Second answer from the queue.",
      `the stored session's last messages: ${JSON.stringify(texts.map((text) => text.slice(0, 40)))}`,
    );
    check(stored.queuedTurns.length === 0, `turns still queued after both answered: ${stored.queuedTurns.length}`);
    doubleTextSessionId = id;
    return `badge "${badge}"; both answered in order`;
  });

  /** Sends a first message (a medium answer) and waits until its answer streams. */
  async function sendFirstAndWaitStreaming(text) {
    const before = await assistants().count();
    await send(text);
    await page.waitForFunction(
      (count) => {
        const all = document.querySelectorAll('[data-testid="message-assistant"]');
        return all.length > count && (all[all.length - 1]?.querySelector('[data-testid="message-text"]')?.textContent ?? "").startsWith("First answer");
      },
      before,
      { timeout: 30_000 },
    );
  }

  async function storedTexts(id) {
    const { body } = await apiGet(`/api/sessions/${encodeURIComponent(id)}`);
    return {
      session: body,
      texts: body.messages.map((message) => message.parts.filter((part) => part.type === "text").map((part) => part.text).join("")),
    };
  }

  async function pickPolicy(value) {
    const patched = page.waitForResponse((response) => response.request().method() === "PATCH" && response.url().includes("/api/sessions/"));
    await page.getByLabel("During an answer").selectOption(value);
    check((await patched).status() === 200, `PATCH of doubleTexting ${value} failed`);
  }

  await step("double texting: queued through a reload and cancelled", ["double texting: enqueue"], async () => {
    const id = doubleTextSessionId;
    await sendFirstAndWaitStreaming("Double text first: another medium answer.");
    await send("Double text second: waits through a reload.");
    await send("Double text third: cancel me.");
    const queued = page.locator('[data-testid="queued-turn"]');
    const third = queued.filter({ hasText: "cancel me" });
    await third.locator('[data-testid="queued-badge"]', { hasText: /^queued/ }).waitFor({ timeout: 10_000 });
    const badges = (await queued.locator('[data-testid="queued-badge"]').allInnerTexts()).map((text) => text.trim());
    await third.getByRole("button", { name: "Cancel queued message" }).click();
    await third.waitFor({ state: "detached", timeout: 10_000 });
    const { session: afterCancel } = await storedTexts(id);
    check(
      afterCancel.queuedTurns.length === 1 && JSON.stringify(afterCancel.queuedTurns[0].message).includes("waits through a reload"),
      `after Cancel the server lists ${JSON.stringify(afterCancel.queuedTurns.map((turn) => turn.message.parts))}`,
    );
    // A reloaded page lists the queued turn from the session, follows the running one, then the queued one.
    await page.reload();
    const listed = page.locator('[data-testid="queued-turn"]', { hasText: "waits through a reload" });
    await listed.waitFor({ timeout: 15_000 });
    await listed.waitFor({ state: "detached", timeout: 60_000 });
    await page.waitForFunction(
      () => {
        const all = [...document.querySelectorAll('[data-testid="message-assistant"] [data-testid="message-text"]')].map((node) => node.textContent ?? "");
        const status = document.querySelector('[data-testid="chat-status"]')?.getAttribute("data-status");
        return all[all.length - 1] === "Second answer from the queue." && status === "ready";
      },
      null,
      { timeout: 60_000 },
    );
    const { texts } = await storedTexts(id);
    const tail = texts.slice(-4);
    check(
      tail[0].startsWith("Double text first") && tail[1].startsWith("First answer") && tail[2].startsWith("Double text second") && tail[3] === "Second answer from the queue.",
      `the stored session's last messages: ${JSON.stringify(tail.map((text) => text.slice(0, 40)))}`,
    );
    check(!texts.some((text) => text.includes("cancel me")), "the cancelled queued message was stored");
    const shown = await page.locator('[data-testid="message-user"]').allInnerTexts();
    check(!shown.some((text) => text.includes("cancel me")), "the cancelled queued message is shown");
    return `badges ${JSON.stringify(badges)}; after the reload the queued turn ran`;
  });

  /** The chat is ready again with the newer message's answer last (the interrupting or rolling-back turn's). */
  async function newerAnswerShown() {
    await page.waitForFunction(
      () => {
        const all = [...document.querySelectorAll('[data-testid="message-assistant"] [data-testid="message-text"]')].map((node) => node.textContent ?? "");
        const status = document.querySelector('[data-testid="chat-status"]')?.getAttribute("data-status");
        return all[all.length - 1] === "Answer to the newer message." && status === "ready";
      },
      null,
      { timeout: 60_000 },
    );
  }

  await step("double texting: interrupt", ["double texting: enqueue"], async () => {
    const conflictsBefore = conflictAnswers.length;
    const id = doubleTextSessionId;
    await page.goto(`${url}/#/chat/${encodeURIComponent(id)}`);
    await assistants().first().waitFor({ timeout: 15_000 });
    await pickPolicy("interrupt");
    await sendFirstAndWaitStreaming("Double text first: to be interrupted.");
    await send("Double text newer: interrupts the first.");
    await newerAnswerShown();
    await waitSaved();
    const { session, texts } = await storedTexts(id);
    const tail = texts.slice(-4);
    check(
      tail[0] === "Double text first: to be interrupted." && tail[1].startsWith("First answer") && tail[2].startsWith("Double text newer") && tail[3] === "Answer to the newer message.",
      `the stored session's last messages: ${JSON.stringify(tail.map((text) => text.slice(0, 40)))}`,
    );
    const cut = session.messages[session.messages.length - 3];
    check(cut.metadata?.cancelled === true, `the interrupted answer is not marked cancelled: ${JSON.stringify(cut.metadata)}`);
    const interrupted = page.locator(`[data-testid="message-assistant"][data-message-id="${cut.id}"]`);
    check(await interrupted.locator('[data-testid="message-stopped"]').isVisible(), "the interrupted answer is not shown as stopped");
    check(conflictAnswers.length === conflictsBefore, `answered 409: ${conflictAnswers.slice(conflictsBefore).join(", ")}`);
    return `the first answer was cut at ${tail[1].length} characters and kept`;
  });

  await step("double texting: rollback", ["double texting: enqueue"], async () => {
    const conflictsBefore = conflictAnswers.length;
    const id = doubleTextSessionId;
    await pickPolicy("rollback");
    const { texts: before } = await storedTexts(id);
    await sendFirstAndWaitStreaming("Double text first: to be rolled back.");
    await send("Double text newer: replaces the first.");
    await newerAnswerShown();
    await waitSaved();
    const { texts } = await storedTexts(id);
    check(
      JSON.stringify(texts) === JSON.stringify([...before, "Double text newer: replaces the first.", "Answer to the newer message."]),
      `the stored session is not the old one plus the newer turn: ${JSON.stringify(texts.slice(-4).map((text) => text.slice(0, 40)))}`,
    );
    const shown = await page.locator('[data-testid="message-user"]').allInnerTexts();
    check(!shown.some((text) => text.includes("to be rolled back")), "the rolled-back message is still shown");
    check(conflictAnswers.length === conflictsBefore, `answered 409: ${conflictAnswers.slice(conflictsBefore).join(", ")}`);
    return "the rolled-back prompt and answer left the chat and the session";
  });

  await step("a second tab follows the turn and queues a message", ["streamed text"], async () => {
    // Tab A sends; tab B opens the same chat while the answer streams, shows it streaming (not empty,
    // not interrupted) to its end, and queues a message of its own (the session's policy: enqueue),
    // answered after the first in both tabs. Tab A, reloaded mid-answer, shows the answer finish.
    // Neither tab is answered 409, logs an error or shows a conflict.
    const id = await newSession("Start the two tabs chat.");
    await pickPolicy("enqueue");
    const problems = [];
    const second = await context.newPage();
    for (const [name, tab] of [["tab A", page], ["tab B", second]]) {
      tab.on("response", (response) => {
        if (response.status() === 409) problems.push(`${name}: 409 ${response.request().method()} ${new URL(response.url()).pathname}`);
      });
      tab.on("console", (message) => {
        if (message.type() === "error") problems.push(`${name}: console error ${message.text()}`);
      });
      tab.on("pageerror", (error) => problems.push(`${name}: ${error.message}`));
    }
    const lastAnswer = () => {
      const all = document.querySelectorAll('[data-testid="message-assistant"]');
      const last = all[all.length - 1];
      return {
        text: [...(last?.querySelectorAll('[data-testid="message-text"]') ?? [])].map((node) => node.textContent ?? "").join(""),
        interrupted: Boolean(last?.querySelector('[data-testid="message-interrupted"]')),
        status: document.querySelector('[data-testid="chat-status"]')?.getAttribute("data-status"),
      };
    };
    try {
      const before = await assistants().count();
      await send("Two tabs: a long answer to follow.");
      await page.waitForFunction(
        (count) => {
          const all = document.querySelectorAll('[data-testid="message-assistant"]');
          return all.length > count && (all[all.length - 1]?.querySelector('[data-testid="message-text"]')?.textContent ?? "").startsWith("Answer followed");
        },
        before,
        { timeout: 30_000 },
      );
      await second.goto(`${url}/#/chat/${encodeURIComponent(id)}`);
      // Tab B shows the running answer as it streams, never as an empty or interrupted message.
      await second.waitForFunction(
        () => {
          const last = [...document.querySelectorAll('[data-testid="message-assistant"]')].pop();
          return (last?.querySelector('[data-testid="message-text"]')?.textContent ?? "").startsWith("Answer followed");
        },
        null,
        { timeout: 15_000 },
      );
      const first = await second.evaluate(lastAnswer);
      check(first.status === "streaming", `tab B's chat is "${first.status}" while the answer runs`);
      check(!first.interrupted, "tab B shows the running answer as interrupted");
      await second.waitForFunction(
        (length) => {
          const all = document.querySelectorAll('[data-testid="message-assistant"]');
          return (all[all.length - 1]?.querySelector('[data-testid="message-text"]')?.textContent ?? "").length > length;
        },
        first.text.length,
        { timeout: 15_000 },
      );
      // Sent from tab B while the turn runs: queued there (the badge), not refused.
      const secondComposer = second.getByRole("textbox", { name: "Message", exact: true });
      await secondComposer.fill("Two tabs queued: sent from the second tab.");
      await secondComposer.press("Enter");
      const queued = second.locator('[data-testid="queued-turn"]', { hasText: "sent from the second tab" });
      await queued.locator('[data-testid="queued-badge"]', { hasText: /^queued/ }).waitFor({ timeout: 10_000 });
      check((await page.evaluate(lastAnswer)).status === "streaming", "tab A's answer ended before tab B's message was queued");
      const { body: waiting } = await apiGet(`/api/sessions/${encodeURIComponent(id)}`);
      check(waiting.queuedTurns.length === 1, `the server lists ${waiting.queuedTurns.length} queued turns`);
      await second.screenshot({ path: resolve(outDir, "second-tab-queued-1440.png") });
      // Tab A reloaded mid-answer: the answer goes on there (to its end, checked below), and tab B's
      // message shows queued there too.
      await page.reload();
      await page.waitForFunction(
        () => {
          const last = [...document.querySelectorAll('[data-testid="message-assistant"]')].pop();
          const status = document.querySelector('[data-testid="chat-status"]')?.getAttribute("data-status");
          return status === "streaming" && (last?.querySelector('[data-testid="message-text"]')?.textContent ?? "").startsWith("Answer followed");
        },
        null,
        { timeout: 15_000 },
      );
      check(!(await page.evaluate(lastAnswer)).interrupted, "the reloaded tab shows the running answer as interrupted");
      await page.locator('[data-testid="queued-turn"]', { hasText: "sent from the second tab" }).waitFor({ timeout: 10_000 });
      // Both tabs: the first answer whole, then tab B's message and its answer, in that order.
      const expected = ["Two tabs: a long answer to follow.", "Answer followed by two tabs:", "Two tabs queued: sent from the second tab.", "Answer to the message the second tab queued."];
      for (const [name, tab] of [["tab A", page], ["tab B", second]]) {
        await tab.waitForFunction(
          () => {
            const all = [...document.querySelectorAll('[data-testid="message-assistant"] [data-testid="message-text"]')].map((node) => node.textContent ?? "");
            const status = document.querySelector('[data-testid="chat-status"]')?.getAttribute("data-status");
            return all[all.length - 1] === "Answer to the message the second tab queued." && status === "ready";
          },
          null,
          { timeout: 90_000 },
        );
        const tail = (await tab.locator('[data-testid="message-user"], [data-testid="message-assistant"]').allInnerTexts())
          .slice(-4)
          .map((text) => text.trim().split("\n")[0]);
        check(
          tail.length === 4 && tail.every((text, index) => text.startsWith(expected[index])),
          `${name}'s last messages: ${JSON.stringify(tail.map((text) => text.slice(0, 50)))}`,
        );
        const answers = tab.locator('[data-testid="message-assistant"]');
        const firstAnswer = answers.nth((await answers.count()) - 2);
        check((await firstAnswer.locator('[data-testid="message-text"]').innerText()).trim().endsWith("piece219"), `${name} does not show the first answer whole`);
        check(!(await tab.locator('[data-testid="message-interrupted"]').count()), `${name} marks an answer interrupted`);
        check(!(await tab.locator('[data-testid="queued-turn"]').count()), `${name} still shows a queued message`);
      }
      const { texts } = await storedTexts(id);
      const stored = texts.slice(-4);
      check(
        stored.length === 4 && stored.every((text, index) => text.startsWith(expected[index])),
        `the stored session's last messages: ${JSON.stringify(stored.map((text) => text.slice(0, 50)))}`,
      );
      check(problems.length === 0, problems.slice(0, 4).join(" | "));
      return "tab B followed the running answer and queued a message; tab A reloaded mid-answer saw it finish; both show the queued answer after it; no 409, no console error";
    } finally {
      await second.close();
    }
  });

  await step("chat screenshots", [], async () => {
    if (chatSessionId) await page.goto(`${url}/#/chat/${encodeURIComponent(chatSessionId)}`);
    await page.waitForTimeout(500);
    await page.screenshot({ path: resolve(outDir, "chat-1440.png") });
    await page.setViewportSize(NARROW);
    await page.waitForTimeout(300);
    await page.screenshot({ path: resolve(outDir, "chat-375.png") });
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(overflow <= 0, `the chat is ${overflow}px wider than a 375px screen`);
    // The sessions list is a drawer at this width.
    await page.getByRole("button", { name: "Show chats" }).click();
    await page.locator('[data-testid="session-list"]').waitFor({ state: "visible" });
    await page.waitForTimeout(400); // the drawer slides in
    await page.screenshot({ path: resolve(outDir, "chat-375-sessions.png") });
    await page.getByRole("button", { name: "Hide chats" }).click();
    await page.setViewportSize(WIDE);
    return "chat-1440.png, chat-375.png, chat-375-sessions.png";
  });

  await step("a message sent while scrolled up lands in view", ["streamed text"], async () => {
    // A short window, so two answers overflow it.
    await page.setViewportSize({ width: WIDE.width, height: 560 });
    try {
      return await sentWhileScrolledUp();
    } finally {
      await page.setViewportSize(WIDE);
    }
  });

  async function sentWhileScrolledUp() {
    await newSession("Give me a markdown summary.");
    await send("Give me a markdown summary once more.");
    await waitTurnOver();
    const log = page.getByRole("log", { name: "Conversation" });
    const room = await log.evaluate((element) => element.scrollHeight - element.clientHeight);
    check(room > 300, `the conversation scrolls only ${room} px: there is nothing to scroll up from`);
    // A little above the end, as a reader who glanced back up would be.
    await log.evaluate((element) => {
      element.scrollTop = element.scrollHeight - element.clientHeight - 200;
    });
    await page.waitForTimeout(200); // the scroll event is handled
    await send("Give me a markdown summary, the last one.");
    await waitTurnOver();
    const gap = await log.evaluate((element) => element.scrollHeight - element.scrollTop - element.clientHeight);
    check(gap < 80, `the conversation stayed ${gap} px above its end after a message was sent`);
    return `scrolled 200 px up, sent: the end is in view (${gap} px)`;
  }

  await step("rename and archive", ["api key prompt"], async () => {
    await page.goto(`${url}/#/chat`);
    const id = await newSession("A chat to rename.");
    const item = page.locator(`[data-testid="session-item"][data-session-id="${id}"]`);
    await item.waitFor();
    await menuAction(item, "Rename");
    const input = item.getByRole("textbox", { name: "New title" });
    check(await input.evaluate((node) => node === document.activeElement), "the rename box did not get focus");
    await input.fill("Renamed by the browser test");
    await input.press("Enter");
    await item.getByText("Renamed by the browser test").waitFor();
    await item.getByRole("img", { name: "title locked" }).waitFor();
    let { body: session } = await apiGet(`/api/sessions/${encodeURIComponent(id)}`);
    check(session.title === "Renamed by the browser test" && session.titleLocked === true, "the rename did not lock the title");
    await menuAction(item, "Archive");
    await item.waitFor({ state: "detached" });
    await page.getByRole("button", { name: "Archived", exact: true }).click();
    await page.locator('[data-testid="session-list"][data-archived="true"]').waitFor();
    await item.waitFor();
    ({ body: session } = await apiGet(`/api/sessions/${encodeURIComponent(id)}`));
    check(session.archived === true, "the session is not archived on the server");
    // The archived chat, opened again: its title as the page's heading, a notice that it is archived, Restore.
    await page.reload();
    const notice = page.locator('[data-testid="archived-notice"]');
    await notice.waitFor({ timeout: 15_000 });
    const heading = await page.getByRole("heading", { level: 1 }).innerText();
    check(heading === "Renamed by the browser test", `the chat's heading is "${heading}"`);
    check((await page.locator('[data-testid="session-list"]').getAttribute("data-archived")) !== "true", "the reloaded page lists the archived chats");
    check(!(await item.count()), "the archived chat is listed with the active ones");
    await notice.getByRole("button", { name: "Restore" }).click();
    await notice.waitFor({ state: "detached" });
    await item.waitFor();
    ({ body: session } = await apiGet(`/api/sessions/${encodeURIComponent(id)}`));
    check(session.archived === false, "Restore in the notice did not restore the session");
    return `session ${id} renamed (locked), archived (its notice shown on opening it) and restored from the notice`;
  });

  await step("delete with confirmation", ["api key prompt"], async () => {
    const id = await newSession("A chat to delete.");
    const item = page.locator(`[data-testid="session-item"][data-session-id="${id}"]`);
    await menuAction(item, "Delete…");
    const dialog = page.getByRole("dialog", { name: "Delete this chat permanently?" });
    await dialog.waitFor();
    await dialog.getByRole("button", { name: "Cancel" }).click();
    check((await item.count()) === 1, "cancelling the confirmation deleted the chat");
    await menuAction(item, "Delete…");
    await dialog.getByRole("button", { name: "Delete permanently" }).click();
    await item.waitFor({ state: "detached" });
    const { status } = await apiGet(`/api/sessions/${encodeURIComponent(id)}`);
    check(status === 404, `the deleted session still answers ${status}`);
    return `session ${id} deleted after confirming`;
  });

  await step("setting validation error", ["api key prompt"], async () => {
    await page.goto(`${url}/#/settings/agent-runtime`);
    const form = page.locator('form[data-form="AgentRuntimeSettingsPatch"]');
    const field = form.locator('[data-field="supervisorMaxSteps"]');
    await field.waitFor();
    await field.getByRole("spinbutton").fill("1");
    await form.getByRole("button", { name: "Save", exact: true }).click();
    const error = field.locator('[data-testid="field-error"]');
    await error.waitFor({ timeout: 10_000 });
    const message = await error.innerText();
    check(/^Must be at least 2\.$/.test(message), `the field error is not in words: "${message}"`);
    check((await field.getByRole("spinbutton").getAttribute("aria-invalid")) === "true", "the field is not marked invalid");
    await page.screenshot({ path: resolve(outDir, "settings-1440.png") });
    await page.setViewportSize(NARROW);
    await field.scrollIntoViewIfNeeded();
    await page.waitForTimeout(300);
    await page.screenshot({ path: resolve(outDir, "settings-375.png") });
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(overflow <= 0, `the settings page is ${overflow}px wider than a 375px screen`);
    await page.setViewportSize(WIDE);
    let { body: settings } = await apiGet("/api/settings/agent-runtime");
    check(settings.supervisorMaxSteps !== 1, "the refused value was stored");
    const valid = settings.supervisorMaxSteps === 12 ? 13 : 12;
    await field.getByRole("spinbutton").fill(String(valid));
    await form.getByRole("button", { name: "Save", exact: true }).click();
    await form.locator('[data-testid="submit-status"][data-state="saved"]').waitFor({ timeout: 10_000 });
    const report = await form.locator('[data-testid="submit-status"]').innerText();
    check(report.includes("Supervisor max steps"), `the save does not say what was saved: "${report}"`);
    check(await form.getByRole("button", { name: "Save", exact: true }).isDisabled(), "Save stays enabled with nothing changed");
    check((await error.count()) === 0, "the field error stayed after a valid save");
    ({ body: settings } = await apiGet("/api/settings/agent-runtime"));
    check(settings.supervisorMaxSteps === valid, `the saved value is ${settings.supervisorMaxSteps}, not ${valid}`);
    return `shown beside the field: "${message}"; ${valid} saved ("${report}")`;
  });

  await step("unsaved changes warning", ["setting validation error"], async () => {
    await page.goto(`${url}/#/settings/agent-runtime`);
    const form = page.locator('form[data-form="AgentRuntimeSettingsPatch"]');
    const field = form.locator('[data-field="supervisorMaxSteps"]');
    await field.waitFor();
    check(await form.getByRole("button", { name: "Save", exact: true }).isDisabled(), "Save is enabled before any change");
    const groups = await form.locator("legend").allInnerTexts();
    check(groups[0] === "Model" && groups.includes("Background tasks"), `the fields are grouped as ${JSON.stringify(groups)}`);
    const before = await field.getByRole("spinbutton").inputValue();
    await field.getByRole("spinbutton").fill(String(Number(before) + 1));
    await page.getByRole("link", { name: "Memory compaction" }).click();
    const dialog = page.getByRole("dialog", { name: "Leave without saving?" });
    await dialog.waitFor({ timeout: 5_000 });
    await page.screenshot({ path: resolve(outDir, "settings-unsaved-1440.png") });
    await dialog.getByRole("button", { name: "Cancel" }).click();
    check(new URL(page.url()).hash === "#/settings/agent-runtime", `cancelling left the page for ${page.url()}`);
    check((await field.getByRole("spinbutton").inputValue()) === String(Number(before) + 1), "the edit was lost after cancelling");
    await page.getByRole("link", { name: "Memory compaction" }).click();
    await dialog.getByRole("button", { name: "Leave without saving" }).click();
    await page.waitForFunction(() => location.hash === "#/settings/memory");
    const memory = page.locator('form[data-form="MemorySettingsPatch"] [data-field]').first();
    check((await memory.getAttribute("data-field")) === "enabled", `the memory form starts with ${await memory.getAttribute("data-field")}, not its enable switch`);
    const { body } = await apiGet("/api/settings/agent-runtime");
    check(String(body.supervisorMaxSteps) === before, "the unsaved edit was stored");
    return `asked before leaving; cancel kept the edit, leave dropped it; groups ${groups.join(", ")}`;
  });

  await step("schedule with a cron error and the server's next runs", ["api key prompt"], async () => {
    await page.goto(`${url}/#/tasks`);
    await page.getByText("New schedule").click();
    const form = page.locator('form[data-form="ScheduleCreate"]');
    await form.getByLabel("Name").fill("Browser test nightly");
    await form.getByLabel(/^Cron/).fill("not a cron");
    await form.getByLabel("Prompt").fill("Summarise the day.");
    await form.getByRole("button", { name: "Create schedule" }).click();
    const status = form.locator('[data-testid="submit-status"]');
    await form.locator('[data-testid="submit-status"][data-state="saved"], [data-testid="submit-status"][data-state="failed"]').waitFor({ timeout: 10_000 });
    const error = form.locator('[data-field="cron"] [data-testid="field-error"]');
    check((await error.count()) === 1, `no error beside the cron field; the form says "${await status.innerText()}"`);
    const message = await error.innerText();
    check(message.includes("0 9 * * 1-5"), `the cron error gives no example: "${message}"`);
    await form.getByLabel(/^Cron/).fill("0 3 * * *");
    await form.getByRole("button", { name: "Create schedule" }).click();
    const item = page.locator('[data-testid="schedule-item"]').filter({ hasText: "Browser test nightly" });
    await item.waitFor({ timeout: 10_000 });
    const { body } = await apiGet("/api/schedules");
    const stored = body.schedules.find((schedule) => schedule.name === "Browser test nightly");
    check(stored && stored.nextRuns.length > 0, "the server has no next runs for the schedule");
    const shown = await item.locator('[data-testid="next-runs"] time').evaluateAll((nodes) => nodes.map((node) => node.getAttribute("datetime")));
    check(shown.length > 0 && shown.every((run, index) => run === stored.nextRuns[index]), "the next runs shown are not the server's");
    await item.getByRole("button", { name: "Pause" }).click();
    await item.locator('[data-testid="schedule-paused"]').waitFor({ timeout: 10_000 });
    check((await item.locator('[data-testid="next-runs"]').count()) === 0, "a paused schedule still lists next runs");
    check((await item.locator('[data-testid="schedule-state"]').innerText()) === "paused", "the paused schedule is not marked paused");
    await page.screenshot({ path: resolve(outDir, "schedule-paused-1440.png") });
    await item.getByRole("button", { name: "Delete" }).click();
    await page.getByRole("dialog", { name: "Delete this schedule?" }).getByRole("button", { name: "Delete" }).click();
    await item.waitFor({ state: "detached" });
    return `cron error beside the field ("${message}"); ${shown.length} next runs from the server`;
  });

  await step("long-term memories", ["api key prompt"], async () => {
    await page.goto(`${url}/#/settings/memories`);
    const form = page.locator('form[data-form="MemoryCreate"]');
    await form.getByLabel("New memory").fill("The browser test prefers short answers.");
    await form.getByRole("button", { name: "Remember" }).click();
    const status = form.locator('[data-testid="submit-status"]');
    await form.locator('[data-testid="submit-status"][data-state="saved"], [data-testid="submit-status"][data-state="failed"]').waitFor({ timeout: 10_000 });
    const said = await status.innerText();
    check((await status.getAttribute("data-state")) === "saved", `the memory was refused: "${said}"${/Method not found/.test(said) ? UNSERVED : ""}`);
    const item = page.locator('[data-testid="memory-item"]').filter({ hasText: "The browser test prefers short answers." });
    await item.waitFor({ timeout: 10_000 });
    await form.getByLabel("New memory").fill("x".repeat(2001));
    await form.getByRole("button", { name: "Remember" }).click();
    const error = form.locator('[data-testid="field-error"]');
    await error.waitFor({ timeout: 10_000 });
    await item.getByRole("button", { name: "Forget" }).click();
    await page.getByRole("dialog", { name: "Forget this memory?" }).getByRole("button", { name: "Forget" }).click();
    await item.waitFor({ state: "detached" });
    const { body } = await apiGet("/api/memories");
    check(!body.memories.some((memory) => memory.content.includes("browser test")), "the forgotten memory is still stored");
    return `added, refused over the bound ("${await error.innerText()}"), forgotten`;
  });

  await step("skills editor", ["api key prompt"], async () => {
    await page.goto(`${url}/#/skills/researcher`);
    const list = page.locator('[data-testid="skill-list"]');
    await list.getByText("source-verification", { exact: true }).waitFor({ timeout: 10_000 });
    await page.getByText("Import a SKILL.md").click();
    const md = "---\nname: ui-imported\ndescription: Imported by the browser test.\n---\n# Steps\n1. Do it.\n";
    await page.getByLabel("or paste it").fill(md);
    await page.getByRole("button", { name: "Import" }).click();
    const item = list.locator("li").filter({ hasText: "ui-imported" });
    await item.waitFor({ timeout: 10_000 });
    await item.getByRole("button", { name: "Delete" }).click();
    await item.waitFor({ state: "detached" });
    return "seeded skills listed; a pasted SKILL.md imported, then deleted";
  });

  await step("browser profile panel", ["api key prompt"], async () => {
    const call = async (method, path, body) => {
      const response = await fetch(`${url}${path}`, {
        method,
        headers: { "x-popagent-key": apiKey, "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await response.text();
      return { status: response.status, body: text ? JSON.parse(text) : null };
    };
    const { body: before } = await apiGet("/api/settings/browser");
    const sessions = [];
    try {
      check((await call("PATCH", "/api/settings/browser", { enabled: true })).status === 200, "the browser could not be enabled");
      const created = await call("POST", "/api/browser/profiles", { name: "ui-work" });
      check(created.status === 201, `POST /api/browser/profiles answered ${created.status}`);
      for (const title of ["browser profile", "browser profile 2"]) {
        const made = await call("POST", "/api/sessions", { title });
        check(made.status === 201, `POST /api/sessions answered ${made.status}`);
        sessions.push(made.body.id);
      }
      await page.goto(`${url}/#/chat/${encodeURIComponent(sessions[0])}`);
      const panel = page.getByTestId("browser-panel");
      await panel.waitFor({ timeout: 10_000 });
      const select = panel.getByTestId("browser-profile").locator("select");
      await select.selectOption("ui-work");
      let chosen = null;
      for (let i = 0; i < 50 && chosen !== "ui-work"; i++) {
        chosen = (await apiGet(`/api/browser/sessions/${sessions[0]}/profile`)).body.profile;
        if (chosen !== "ui-work") await page.waitForTimeout(100);
      }
      check(chosen === "ui-work", `the session's profile is ${chosen}`);
      const empty = (await panel.getByTestId("browser-recording").innerText()).trim();
      check(empty === "No recorded browser steps yet.", `the recording reads "${empty}"`);
      await page.screenshot({ path: resolve(outDir, "browser-profile-1440.png") });
      await page.reload();
      await page.getByTestId("browser-panel").waitFor({ timeout: 10_000 });
      await page.waitForFunction(
        () => document.querySelector('[data-testid="browser-profile"] select')?.value === "ui-work",
        null,
        { timeout: 10_000 },
      );
      // Another chat cannot pick the profile this one uses.
      await page.goto(`${url}/#/chat/${encodeURIComponent(sessions[1])}`);
      const other = page.getByTestId("browser-panel").getByTestId("browser-profile").locator('option[value="ui-work"]');
      await other.waitFor({ state: "attached", timeout: 10_000 });
      check(await other.isDisabled(), "a profile in use by another chat can be picked");
      const label = (await other.innerText()).trim();
      check(label.includes("in use by another chat"), `the option reads "${label}"`);
      return `profile chosen and kept through a reload; shown in use to the other chat ("${label}")`;
    } finally {
      for (const id of sessions) await call("DELETE", `/api/sessions/${id}`);
      await call("DELETE", "/api/browser/profiles/ui-work");
      await call("PATCH", "/api/settings/browser", { enabled: before.enabled });
    }
  });

  await step("browser panel beside the chat with takeover input", ["first-use model pick"], async () => {
    const call = async (method, path, body) => {
      const response = await fetch(`${url}${path}`, {
        method,
        headers: { "x-popagent-key": apiKey, "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await response.text();
      return { status: response.status, body: text ? JSON.parse(text) : null };
    };
    const { body: before } = await apiGet("/api/settings/browser");
    // The supervisor lists the browser tool for this step (added when its profile does not; adding it
    // twice is refused: "tools must not repeat a tool").
    const supervisor = (await apiGet("/api/agents")).body.agents.find((agent) => agent.id === "popagent");
    let sessionId = null;
    try {
      check((await call("PATCH", "/api/settings/browser", { enabled: true })).status === 200, "the browser could not be enabled");
      const tools = supervisor.tools.includes("bifrostNavigator") ? supervisor.tools : [...supervisor.tools, "bifrostNavigator"];
      const given = await call("PATCH", "/api/agents/popagent", { tools });
      check(given.status === 200, `the supervisor could not be given bifrostNavigator: ${given.status} ${JSON.stringify(given.body)}`);
      await page.setViewportSize(WIDE);
      sessionId = await newSession("Open the form page, please.");
      const panel = page.getByTestId("browser-panel");
      const screen = panel.getByTestId("browser-screen");
      await screen.waitFor({ timeout: 20_000 });
      await page.waitForFunction(() => document.querySelector('[data-testid="browser-screen"]')?.naturalWidth > 0, null, { timeout: 10_000 });

      // Beside the chat, not over it: the conversation keeps most of the width, the composer and the
      // panel's buttons do not overlap, and the Take over button is what a click at its centre hits.
      const conversation = await page.locator(".conversation").boundingBox();
      const box = await panel.boundingBox();
      const composerBox = await page.locator(".composer").boundingBox();
      const takeOver = panel.getByRole("button", { name: "Take over" });
      const buttonBox = await takeOver.boundingBox();
      check(conversation.width >= 600, `the conversation is ${Math.round(conversation.width)} px wide beside the panel`);
      check(box.x >= conversation.x + conversation.width - 1, `the panel (x ${box.x}) overlaps the conversation (to ${conversation.x + conversation.width})`);
      check(box.height >= 400, `the panel is ${Math.round(box.height)} px high`);
      check(composerBox.x + composerBox.width <= box.x + 1, "the composer reaches under the panel");
      const textareaBox = await composer().boundingBox();
      check(textareaBox.width >= 400, `the message box is ${Math.round(textareaBox.width)} px wide`);
      const hit = await page.evaluate(([x, y]) => document.elementFromPoint(x, y)?.textContent?.trim(), [buttonBox.x + buttonBox.width / 2, buttonBox.y + buttonBox.height / 2]);
      check(hit === "Take over", `a click on Take over lands on "${hit}"`);
      // The composer still sends while the panel is open.
      await composer().fill("typed beside the browser panel");
      check((await composer().inputValue()) === "typed beside the browser panel", "the message box does not take text");
      await composer().fill("");
      await page.screenshot({ path: resolve(outDir, "browser-panel-1440.png") });

      // Take over: the screenshot takes clicks and keys, forwarded to the page.
      // What the panel posts and what the server answers (the page's form receiving "hello" is checked by
      // test_browser.py on the page server's side).
      const answers = [];
      const onAnswer = async (response) => {
        const path = new URL(response.url()).pathname;
        if (path.startsWith(`/api/browser/sessions/${sessionId}/`) && response.request().method() === "POST") {
          answers.push(`${path.split("/").pop()} ${response.status()} ${response.status() >= 400 ? await response.text().catch(() => "") : ""}`.trim());
        }
      };
      page.on("response", onAnswer);
      await takeOver.click();
      await panel.getByRole("button", { name: "Release to the agent" }).waitFor({ timeout: 10_000 });
      const held = panel.locator('[data-testid="browser-screen"].interactive');
      await held.waitFor({ timeout: 10_000 });
      const shown = await held.boundingBox();
      const natural = await held.evaluate((img) => img.naturalWidth);
      const scale = shown.width / natural;
      // The form's field is at (20, 20), 300 x 40 CSS pixels of the page.
      await page.mouse.click(shown.x + 60 * scale, shown.y + 40 * scale);
      await page.keyboard.type("hello");
      await page.keyboard.press("Enter");
      const deadline = Date.now() + 15_000;
      while (answers.filter((a) => a.startsWith("input")).length < 7 && Date.now() < deadline) await page.waitForTimeout(100);
      page.off("response", onAnswer);
      const forwarded = answers.filter((a) => a.startsWith("input"));
      check(forwarded.length === 7 && forwarded.every((a) => a === "input 204"), `the panel's input: ${answers.join("; ")}`);
      await page.waitForFunction(() => !document.querySelector('[data-testid="browser-error"]'), null, { timeout: 10_000 }).catch(() => undefined);
      const failure = await panel.getByTestId("browser-error").count();
      check(!failure, `the panel shows: ${failure ? await panel.getByTestId("browser-error").innerText() : ""} (${answers.join("; ")})`);
      await page.screenshot({ path: resolve(outDir, "browser-panel-takeover-1440.png") });
      await panel.getByRole("button", { name: "Release to the agent" }).click();
      await takeOver.waitFor({ timeout: 10_000 });

      // The recording lists the agent's navigation; the step shows its screenshot and a link to download it.
      const recording = panel.getByTestId("browser-recording").locator("summary");
      await recording.waitFor({ timeout: 15_000 });
      const recorded = (await recording.innerText()).trim();
      check(/^Recording: \d+ steps?$/.test(recorded), `the recording reads "${recorded}"`);
      await recording.click();
      await panel.getByTestId("browser-recording").getByRole("button", { name: "browser_navigate" }).first().click();
      await page.waitForFunction(
        () => document.querySelector('[data-testid="browser-recording"] figure img')?.naturalWidth > 0,
        null,
        { timeout: 10_000 },
      );
      const download = panel.getByTestId("browser-recording").locator("figcaption a");
      const saveAs = await download.getAttribute("download");
      check(saveAs === `${sessionId}-1.png`, `the step downloads as "${saveAs}"`);
      check((await download.innerText()).trim() === "Download step 1", `the link reads "${await download.innerText()}"`);

      // The tab goes away (closed here, as a restarted browser would lose it): the panel says so in its
      // own words, and the API answers 404 with the reason, not that a service is down.
      check((await call("DELETE", `/api/browser/sessions/${sessionId}`)).body?.closed === true, "the tab was not closed");
      const gone = panel.getByTestId("browser-gone");
      await gone.waitFor({ timeout: 15_000 });
      const said = (await gone.innerText()).trim();
      check(/browser tab is gone/.test(said) && !/unavailable/i.test(said), `the panel says "${said}"`);
      const shot = await call("GET", `/api/browser/sessions/${sessionId}/screenshot`);
      check(shot.status === 404 && /has no browser tab now/.test(shot.body?.error ?? ""), `the screenshot answered ${shot.status} ${JSON.stringify(shot.body)}`);
      await page.screenshot({ path: resolve(outDir, "browser-panel-gone-1440.png") });
      return `conversation ${Math.round(conversation.width)} px beside a ${Math.round(box.width)} px panel; click, "hello" and Enter forwarded; ${recorded} with step 1's screenshot; a closed tab says "${said}"`;
    } finally {
      if (sessionId) await call("DELETE", `/api/sessions/${sessionId}`);
      await call("PATCH", "/api/agents/popagent", { tools: supervisor.tools });
      await call("PATCH", "/api/settings/browser", { enabled: before.enabled });
    }
  });

  await step("mcp servers page", ["api key prompt"], async () => {
    await page.goto(`${url}/#/mcp`);
    const list = page.locator('[data-testid="mcp-server-list"]');
    await list.waitFor({ timeout: 10_000 });
    await page.getByRole("button", { name: "Add server" }).click();
    const form = page.getByRole("form", { name: "New MCP server" });
    await form.getByLabel("Name").fill("ui_remote");
    // Nothing listens on port 9: the test must say why it could not connect.
    await form.getByLabel("URL").fill("http://127.0.0.1:9/mcp");
    const token = "ui-walk-token-never-shown";
    await form.getByLabel("Bearer token (optional)").fill(token);
    await form.getByRole("button", { name: "Add server" }).click();
    const item = list.locator("li").filter({ hasText: "ui_remote" });
    await item.waitFor({ timeout: 10_000 });
    check((await item.innerText()).includes("token set"), "the card does not say a token is set");
    await item.getByRole("button", { name: "Test" }).click();
    const status = item.getByRole("status");
    await status.waitFor({ timeout: 30_000 });
    const said = await status.innerText();
    check(said.startsWith("Connection failed:"), `the test reads "${said}"`);
    check(!(await page.content()).includes(token), "the page shows the token");
    await item.getByRole("button", { name: "Delete" }).click();
    await item.waitFor({ state: "detached" });
    return `added with a token (shown only as set), tested: "${said.slice(0, 80)}", deleted`;
  });

  await step("mcp oauth connect", ["api key prompt"], async () => {
    await page.goto(`${url}/#/mcp`);
    const list = page.locator('[data-testid="mcp-server-list"]');
    await list.waitFor({ timeout: 10_000 });
    await page.getByRole("button", { name: "Add server" }).click();
    const form = page.getByRole("form", { name: "New MCP server" });
    await form.getByLabel("Name").fill("ui_oauth");
    await form.getByLabel("URL").fill(oauthMcpUrl);
    await form.getByLabel("Authorization").selectOption("oauth");
    check((await form.getByLabel("Bearer token (optional)").count()) === 0, "an OAuth server asks for a token");
    await form.getByRole("button", { name: "Add server" }).click();
    const item = list.locator("li").filter({ hasText: "ui_oauth" });
    await item.waitFor({ timeout: 10_000 });
    const state = item.getByTestId("mcp-oauth-state");
    check((await state.innerText()) === "OAuth: not connected", `the card reads "${await state.innerText()}"`);
    // Connect opens the authorization server's page in a window of its own; the test's
    // authorization server approves at once and sends it to the gateway's callback, whose page
    // tells this one and closes itself.
    const [popup] = await Promise.all([page.waitForEvent("popup"), item.getByRole("button", { name: "Connect" }).click()]);
    await popup.waitForURL(/\/api\/mcp-servers\/oauth\/callback/, { timeout: 30_000 });
    const said = await popup.locator("h1").innerText();
    check(said === "Connected ui_oauth", `the callback page reads "${said}"`);
    await popup.waitForEvent("close", { timeout: 10_000 });
    await item.getByText("OAuth connected", { exact: true }).waitFor({ timeout: 10_000 });
    check((await item.getByRole("button", { name: "Reconnect" }).count()) === 1, "no Reconnect button once connected");
    const { body } = await apiGet("/api/mcp-servers");
    const stored = body.servers.find((server) => server.name === "ui_oauth");
    check(stored?.oauth?.connected === true, "the server is not connected");
    await item.getByRole("button", { name: "Delete" }).click();
    await item.waitFor({ state: "detached" });
    return "added with OAuth, connected through the authorization window (it closed itself), deleted";
  });

  await step("channels page", ["api key prompt"], async () => {
    await page.goto(`${url}/#/channels`);
    const list = page.locator('[data-testid="channel-list"]');
    await list.waitFor({ timeout: 10_000 });
    await page.getByRole("button", { name: "Add connection" }).click();
    const form = page.getByRole("form", { name: "New channel connection" });
    await form.getByLabel("Platform").selectOption("telegram");
    await form.getByLabel("Name").fill("ui-telegram");
    await form.getByRole("button", { name: "Next" }).click();
    const token = "123456:ui-walk-bot-token-never-shown";
    const secret = "ui-walk-secret-token";
    await form.getByLabel("Bot token").fill(token);
    await form.getByLabel("Secret token").fill(secret);
    await form.getByRole("button", { name: "Next" }).click();
    await form.getByLabel("Allowed users").fill("1001");
    await form.getByLabel("Approvers").fill("1001");
    await form.getByRole("button", { name: "Create connection" }).click();
    const created = page.getByRole("status").filter({ hasText: "ui-telegram" });
    await created.waitFor({ timeout: 10_000 });
    const webhook = await created.getByLabel("Webhook URL").inputValue();
    check(/\/api\/channels\/chn-[0-9a-f]{32}\/events$/.test(webhook), `the webhook URL reads "${webhook}"`);
    // A message from someone not allowed, delivered as Telegram delivers it: the traffic shows why it was ignored.
    const delivered = await fetch(webhook, {
      method: "POST",
      headers: { "content-type": "application/json", "x-telegram-bot-api-secret-token": secret },
      body: JSON.stringify({
        update_id: 1,
        message: { message_id: 1, from: { id: 999, is_bot: false, first_name: "Eve" }, chat: { id: 5, type: "private" }, date: 0, text: "hello" },
      }),
    });
    check(delivered.status === 200, `the webhook answered ${delivered.status}`);
    const item = page.locator('[data-testid="channel"]').filter({ hasText: "ui-telegram" });
    await item.getByRole("button", { name: "Traffic" }).click();
    await item.locator('[data-testid="channel-history"]').getByText("is not among the allowed users").waitFor({ timeout: 10_000 });
    check(!(await page.content()).includes(token), "the page shows the bot token");
    await item.getByRole("button", { name: "Delete" }).click();
    await item.waitFor({ state: "detached" });
    return `added in three steps, webhook URL shown (${webhook.replace(url, "")}), an unallowed sender's message listed as an error, deleted`;
  });

  await step("autonomy page", ["api key prompt"], async () => {
    const { body: before } = await apiGet("/api/settings/autonomy");
    const setEvolution = async (on) => {
      const response = await fetch(`${url}/api/settings/autonomy`, {
        method: "PATCH",
        headers: { "x-popagent-key": apiKey, "content-type": "application/json" },
        body: JSON.stringify({ evolutionEnabled: on }),
      });
      check(response.ok, `PATCH /api/settings/autonomy answered ${response.status}`);
    };
    try {
      // Off, the page says so and where to turn it on, instead of a bare "No signals."
      await setEvolution(false);
      await page.goto(`${url}/#/autonomy`);
      await page.getByRole("heading", { name: "Signals" }).waitFor({ timeout: 10_000 });
      await page.locator('[data-testid="revision-list"]').waitFor({ timeout: 10_000 });
      const notice = page.getByTestId("evolution-off");
      await notice.waitFor({ timeout: 10_000 });
      const said = await notice.innerText();
      check(said.startsWith("Evolution is off") && (await notice.getByRole("link", { name: "Settings → Autonomy" }).count()) === 1, `the notice reads "${said}"`);
      await setEvolution(true);
      await page.reload();
      await page.getByRole("heading", { name: "Signals" }).waitFor({ timeout: 10_000 });
      await page.locator('[data-testid="signal-list"]').waitFor({ timeout: 10_000 });
      check((await page.getByTestId("evolution-off").count()) === 0, "the evolution-off notice shows with evolution on");
      return `off: "${said}"; on: no notice`;
    } finally {
      await setEvolution(before.evolutionEnabled);
    }
  });

  await step("self-update section", ["api key prompt"], async () => {
    const { body: before } = await apiGet("/api/settings/autonomy");
    const patch = async (body) => {
      const response = await fetch(`${url}/api/settings/autonomy`, {
        method: "PATCH",
        headers: { "x-popagent-key": apiKey, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      check(response.ok, `PATCH /api/settings/autonomy answered ${response.status}`);
    };
    try {
      // Off, the page says it does not run and where to turn it on.
      await patch({ evolutionEnabled: true, selfUpdateEnabled: false });
      await page.goto(`${url}/#/autonomy`);
      await page.getByRole("heading", { name: "Self-update attempts" }).waitFor({ timeout: 10_000 });
      // The section first says it is reading the settings; wait for what it says once they are in.
      const status = page.getByTestId("self-update-status");
      await status.filter({ hasNotText: "Reading the autonomy settings" }).waitFor({ timeout: 10_000 });
      const off = await status.innerText();
      check(off.startsWith("Off: no self-update runs"), `off, the section reads "${off}"`);
      // On, it names the cadence and what happens to a reviewed commit.
      await patch({ selfUpdateEnabled: true, selfUpdateCron: "0 4 * * *" });
      await page.reload();
      await status.filter({ hasNotText: "Reading the autonomy settings" }).waitFor({ timeout: 10_000 });
      const on = await status.innerText();
      check(on.startsWith("On (0 4 * * *)") && on.includes("refs/popagent/self-update/"), `on, the section reads "${on}"`);
      await page.locator('[data-testid="self-update-attempts"]').waitFor({ timeout: 10_000 });
      return `off: "${off.slice(0, 40)}…"; on: "${on.slice(0, 40)}…"`;
    } finally {
      await patch({
        evolutionEnabled: before.evolutionEnabled,
        selfUpdateEnabled: before.selfUpdateEnabled,
        selfUpdateCron: before.selfUpdateCron,
      });
    }
  });

  await step("chat remembers its model", ["first-use model pick"], async () => {
    const { body: models } = await apiGet("/api/models");
    const other = models.models.find((model) => model !== models.defaultModel);
    check(other, "the catalog lists only one model");
    const id = await newSession("Which model answers this chat?");
    // No hook ran in this chat: the timeline says how hooks are configured.
    await page.getByRole("button", { name: "Hook timeline" }).click();
    const empty = page.locator('[data-testid="hooks-empty"]');
    await empty.waitFor({ timeout: 10_000 });
    check((await empty.innerText()).includes("POPAGENT_HOOKS"), "the empty timeline does not say how to configure hooks");
    await page.screenshot({ path: resolve(outDir, "hooks-empty-1440.png") });
    await page.getByRole("button", { name: "Hook timeline" }).click();
    await page.locator('[data-testid="model-picker"]').selectOption(other);
    await send("And this one, with the other model?");
    await waitTurnOver();
    await waitSaved();
    await page.reload();
    await assistants().first().waitFor({ timeout: 15_000 });
    await page.waitForFunction((expected) => document.querySelector('[data-testid="model-picker"]')?.value === expected, other, { timeout: 10_000 });
    // Embedding and rerank models are not offered for chat.
    const options = await page.locator('[data-testid="model-picker"] option').evaluateAll((nodes) => nodes.map((node) => node.value));
    check(!options.some((model) => /embed|rerank/i.test(model)), `the picker offers ${JSON.stringify(options)}`);
    check(options.length < models.models.length, `every catalog model (${models.models.length}) is offered for chat`);
    // Back to the default for the steps after this one.
    await page.locator('[data-testid="model-picker"]').selectOption(models.defaultModel);
    return `session ${id} reopened on ${other}; picker offers ${options.join(", ")}`;
  });

  await step("a search finds a word inside a message", ["streamed text"], async () => {
    await page.goto(`${url}/#/chat`);
    const search = page.locator('[data-testid="session-search"]');
    await search.fill("stream me");
    const matches = page.locator('[data-testid="message-matches"]');
    const hit = matches.locator("a.message-match").filter({ hasText: "Hello popagent" }).first();
    await hit.waitFor({ timeout: 10_000 });
    const marked = await hit.locator("mark").allInnerTexts();
    // English stemming: "stream" finds "streams" and "streaming" too.
    check(marked.some((word) => word.toLowerCase().startsWith("stream")), `the excerpt marks ${JSON.stringify(marked)}`);
    await hit.click();
    await page.waitForFunction((id) => location.hash === `#/chat/${encodeURIComponent(id)}`, chatSessionId, { timeout: 10_000 });
    await assistants().first().waitFor({ timeout: 15_000 });
    await search.fill("");
    return `"stream me" found in ${await matches.count()} list, marked ${marked.join(", ")}`;
  });

  await step("sessions grouped and searchable", ["rename and archive"], async () => {
    await page.goto(`${url}/#/chat`);
    const today = page.locator('[data-testid="session-group"][data-group="Today"]');
    await today.waitFor({ timeout: 10_000 });
    const all = await page.locator('[data-testid="session-item"]').count();
    await page.locator('[data-testid="session-search"]').fill("renamed by the browser");
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="session-item"]').length === 1, null, { timeout: 5_000 });
    const shown = await page.locator('[data-testid="session-item"]').innerText();
    check(shown.includes("Renamed by the browser test"), `the search shows "${shown}"`);
    // The title is not cut by action icons: the only control is the menu, shown on hover.
    const item = page.locator('[data-testid="session-item"]').first();
    const opacity = await item.locator('[data-testid="session-menu"]').evaluate((node) => getComputedStyle(node).opacity);
    check(opacity === "0", `the menu button shows without hover (opacity ${opacity})`);
    await item.hover();
    await item.locator('[data-testid="session-menu"]').click();
    await page.getByRole("menu").waitFor();
    await page.screenshot({ path: resolve(outDir, "sessions-1440.png") });
    await page.keyboard.press("Escape");
    await page.locator('[data-testid="session-search"]').fill("");
    return `${all} chats under Today; search by title finds 1`;
  });

  await step("narrow picker shows the model", ["first-use model pick"], async () => {
    await page.goto(`${url}/#/chat/${encodeURIComponent(chatSessionId)}`);
    await assistants().first().waitFor({ timeout: 15_000 });
    await page.setViewportSize(NARROW);
    await page.waitForTimeout(300);
    const picker = page.locator('[data-testid="model-picker"]');
    const shown = await picker.evaluate((node) => ({ value: node.value, width: node.getBoundingClientRect().width, right: node.getBoundingClientRect().right, scroll: node.scrollWidth, client: node.clientWidth }));
    const textWidth = await picker.evaluate((node) => {
      const canvas = document.createElement("canvas").getContext("2d");
      canvas.font = getComputedStyle(node).font;
      return canvas.measureText(node.value).width;
    });
    check(shown.width >= textWidth + 8, `the picker is ${Math.round(shown.width)}px wide for a ${Math.round(textWidth)}px model name "${shown.value}"`);
    check(shown.right <= 375, `the picker ends at ${Math.round(shown.right)}px, past the screen`);
    const box = await composer().boundingBox();
    check(box && box.width >= 200 && box.y + box.height <= 812, `the message box is at ${JSON.stringify(box)}`);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(overflow <= 0, `the chat is ${overflow}px wider than a 375px screen`);
    await page.screenshot({ path: resolve(outDir, "picker-375.png") });
    const pages = {};
    for (const hash of ["#/tasks", "#/settings/agent-runtime", "#/settings/this-browser"]) {
      await page.goto(`${url}/${hash}`);
      await page.waitForTimeout(600);
      pages[hash] = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    }
    const wide = Object.entries(pages).filter(([, over]) => over > 0);
    check(!wide.length, `pages wider than 375px: ${JSON.stringify(wide)}`);
    await page.setViewportSize(WIDE);
    return `"${shown.value}" in ${Math.round(shown.width)}px (text ${Math.round(textWidth)}px); no page scrolls sideways`;
  });

  // A task queued through the API, shown completed on the tasks page: the task and its item there.
  async function completedTask(prompt) {
    const created = await fetch(`${url}/api/tasks`, {
      method: "POST",
      headers: { "x-popagent-key": apiKey, "content-type": "application/json" },
      body: JSON.stringify({ prompt, workspaceId: "popagent" }),
    });
    check(created.status === 201 || created.status === 200, `POST /api/tasks answered ${created.status}`);
    const task = await created.json();
    await page.goto(`${url}/#/tasks`);
    const item = page.locator(`[data-testid="task-item"][data-task-id="${task.id}"]`);
    await item.waitFor({ timeout: 15_000 });
    await page.waitForFunction(
      (id) => document.querySelector(`[data-testid="task-item"][data-task-id="${id}"]`)?.getAttribute("data-status") === "completed",
      task.id,
      { timeout: 60_000 },
    );
    return { task, item };
  }

  await step("docs search readable", ["api key prompt"], async () => {
    // A passage found reads as its document does (rendered Markdown), without the ranking's raw score.
    const added = await fetch(`${url}/api/workspaces/popagent/documents`, {
      method: "POST",
      headers: { "x-popagent-key": apiKey, "content-type": "application/json" },
      body: JSON.stringify({ path: "guides/walk-install.md", content: "# Install\n\nRun **make setup** first, then `make run` to start popagent.\n" }),
    });
    check(added.status === 201, `adding a document answered ${added.status}: ${(await added.text()).slice(0, 200)}`);
    await page.goto(`${url}/#/documents`);
    await page.getByLabel("Question or keywords").fill("make setup first");
    await page.getByRole("search").getByRole("button", { name: "Search" }).click();
    const results = page.getByRole("list", { name: "Search results" });
    const hit = results.getByRole("listitem").filter({ hasText: "guides/walk-install.md" }).first();
    await hit.waitFor({ timeout: 15_000 });
    await hit.locator('[data-testid="doc-excerpt"] strong', { hasText: "make setup" }).waitFor({ timeout: 10_000 });
    const said = await results.innerText();
    check(!said.includes("**"), `a passage shows raw Markdown: "${said.slice(0, 200)}"`);
    check(!/score \d/.test(said), `the results show raw scores: "${said.slice(0, 200)}"`);
    return "the passage rendered as Markdown, no score";
  });

  await step("task page readable", ["api key prompt"], async () => {
    const { task, item } = await completedTask("Give me a markdown summary of the tools.");
    const prompt = await item.locator(".task-prompt").innerText();
    check(prompt.includes("markdown summary of the tools"), `the task shows its prompt as "${prompt}"`);
    const result = item.locator('[data-testid="task-result"] [data-testid="markdown"] table');
    await result.waitFor({ timeout: 15_000 });
    await item.scrollIntoViewIfNeeded();
    await page.screenshot({ path: resolve(outDir, "task-1440.png") });
    // The task, its result and its buttons (Delete included) in both color schemes.
    await checkAxeInBothSchemes(page, `[data-testid="task-item"][data-task-id="${task.id}"]`);
    // Queued from the form, it says so (not "Saved.").
    await page.getByText("New task").click();
    const form = page.locator('form[data-form="TaskCreate"]');
    await form.getByLabel("Prompt").fill("Say hello from the form.");
    await form.getByRole("button", { name: "Queue task" }).click();
    const status = form.locator('[data-testid="submit-status"][data-state="saved"]');
    await status.waitFor({ timeout: 10_000 });
    const said = await status.innerText();
    check(said === "Queued: it runs when a worker is free.", `queueing a task says "${said}"`);
    return `task ${task.id} completed; its result renders as Markdown (a table); no axe violation in light or dark; the form says "${said}"`;
  });

  await step("long task result collapsed", ["api key prompt"], async () => {
    const { task, item } = await completedTask("Give me a long result, one line per item.");
    const text = item.locator('[data-testid="task-result-text"]');
    await text.locator('[data-testid="markdown"]').waitFor({ timeout: 15_000 });
    const toggle = item.getByRole("button", { name: "Show all" });
    check((await toggle.getAttribute("aria-expanded")) === "false", "the collapsed result's button is not aria-expanded=false");
    check((await toggle.getAttribute("aria-controls")) === (await text.getAttribute("id")), "the button does not control the result");
    const collapsed = await text.innerText();
    check(collapsed.includes("Line 6 of the long result") && !collapsed.includes("Line 7 "), `collapsed, the result shows "${collapsed}"`);
    const shortHeight = (await text.boundingBox())?.height ?? 0;
    await checkAxeInBothSchemes(page, `[data-testid="task-item"][data-task-id="${task.id}"]`);
    await toggle.click();
    const less = item.getByRole("button", { name: "Show less" });
    check((await less.getAttribute("aria-expanded")) === "true", "the expanded result's button is not aria-expanded=true");
    const expanded = await text.innerText();
    check(expanded.includes("Line 30 of the long result"), `expanded, the result ends "${expanded.slice(-80)}"`);
    const fullHeight = (await text.boundingBox())?.height ?? 0;
    check(fullHeight > shortHeight * 3, `expanded ${fullHeight} px tall, collapsed ${shortHeight} px`);
    await less.click();
    check(!(await text.innerText()).includes("Line 7 "), "Show less did not collapse the result again");
    return `6 of 30 lines (${Math.round(shortHeight)} px) until "Show all" (${Math.round(fullHeight)} px); "Show less" collapses it; no axe violation`;
  });

  await step("theme toggle", ["api key prompt"], async () => {
    await page.emulateMedia({ colorScheme: "light" });
    await page.goto(`${url}/#/chat`);
    const picker = page.getByRole("combobox", { name: "Theme" });
    await picker.waitFor({ timeout: 10_000 });
    const background = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    const theme = () => page.evaluate(() => document.documentElement.getAttribute("data-theme"));
    check((await picker.inputValue()) === "system", `the picker starts at "${await picker.inputValue()}"`);
    const light = await background();
    await picker.selectOption("dark");
    const dark = await background();
    check((await theme()) === "dark", `data-theme is ${await theme()} after picking Dark`);
    // styles.css's dark --bg (#15161a) and light one (#f7f7f8).
    check(light === "rgb(247, 247, 248)" && dark === "rgb(21, 22, 26)", `the background is ${light}, then ${dark} after picking Dark`);
    const stored = await page.evaluate(() => localStorage.getItem("popagent.theme"));
    check(stored === "dark", `localStorage keeps ${stored}`);
    await checkAxeInBothSchemes(page, ".topbar");
    await page.screenshot({ path: resolve(outDir, "chat-dark-1440.png") });
    await page.reload();
    await picker.waitFor({ timeout: 10_000 });
    check((await picker.inputValue()) === "dark" && (await background()) === dark, "a reload lost the dark theme");
    // Applied before the first paint: with the app's script refused, the page is dark all the same.
    const appScript = /\/assets\/index-[^/]*\.js$/;
    await page.route(appScript, (route) => route.abort());
    try {
      await page.reload();
      await page.waitForLoadState("load");
      check((await theme()) === "dark" && (await background()) === dark, "without the app's script, the reload is not dark");
    } finally {
      await page.unroute(appScript);
    }
    await page.reload();
    await picker.waitFor({ timeout: 10_000 });
    // A picked scheme wins over the system's; System follows it.
    await page.emulateMedia({ colorScheme: "dark" });
    await picker.selectOption("light");
    check((await background()) === light, "Light under a dark system is not light");
    await picker.selectOption("system");
    check((await theme()) === null && (await background()) === dark, "System under a dark system is not dark");
    await page.emulateMedia({ colorScheme: "light" });
    check((await background()) === light, "System under a light system is not light");
    const forgotten = await page.evaluate(() => localStorage.getItem("popagent.theme"));
    check(forgotten === null, `System leaves ${forgotten} in localStorage`);
    return `Dark (${dark}) kept through a reload and set before the app runs; Light and System follow; back to System (${light})`;
  });

  await step("shortcuts sheet", ["api key prompt"], async () => {
    await page.goto(`${url}/#/chat`);
    const newChat = page.getByRole("button", { name: "New chat" });
    await newChat.waitFor({ timeout: 10_000 });
    const focusedId = () => page.evaluate(() => document.activeElement?.id ?? "");
    const sheet = page.getByRole("dialog", { name: "Keyboard shortcuts" });
    await newChat.focus();
    await page.keyboard.press("?");
    await sheet.waitFor({ timeout: 5_000 });
    check((await sheet.getAttribute("aria-modal")) === "true", "the sheet is not aria-modal");
    check(await sheet.getByRole("heading", { name: "Keyboard shortcuts" }).isVisible(), "the sheet has no heading");
    const listed = await sheet.locator('[data-testid="shortcut-list"]').innerText();
    for (const row of ["Focus the message box", "Start a new chat", "Search chats", "Send the message"]) {
      check(listed.includes(row), `the sheet does not list "${row}"`);
    }
    await checkAxeInBothSchemes(page, '[role="dialog"]');
    await page.keyboard.press("Escape");
    await sheet.waitFor({ state: "hidden", timeout: 5_000 });
    check(await newChat.evaluate((node) => node === document.activeElement), "Escape did not give focus back to where it was");
    await page.keyboard.press("Shift+Slash");
    await sheet.waitFor({ timeout: 5_000 });
    await sheet.getByRole("button", { name: "Close" }).click();
    await sheet.waitFor({ state: "hidden", timeout: 5_000 });
    // "/" focuses the message box; there "?" is a character, not the sheet.
    await newChat.focus();
    await page.keyboard.press("/");
    check((await focusedId()) === "composer-input", `"/" focused #${await focusedId()}`);
    await page.keyboard.press("?");
    check(!(await sheet.isVisible()) && (await composer().inputValue()) === "?", "typing ? in the message box opened the sheet");
    await composer().fill("");
    await page.keyboard.press("Control+k");
    check((await focusedId()) === "chat-search", `Ctrl+K focused #${await focusedId()}`);
    await page.goto(`${url}/#/tasks`);
    await page.locator("main h1").first().waitFor({ timeout: 10_000 });
    await page.keyboard.press("Control+Shift+O");
    await page.waitForFunction(() => location.hash === "#/chat" && document.activeElement?.id === "composer-input", null, { timeout: 5_000 });
    // From another page, and on a phone where the search is in the closed drawer.
    await page.setViewportSize(NARROW);
    try {
      await page.goto(`${url}/#/tasks`);
      await page.locator("main h1").first().waitFor({ timeout: 10_000 });
      await page.keyboard.press("Control+k");
      await page.waitForFunction(() => location.hash === "#/chat" && document.activeElement?.id === "chat-search", null, { timeout: 5_000 });
      const drawer = await page.getByRole("button", { name: "Hide chats" }).getAttribute("aria-expanded");
      check(drawer === "true", `the drawer holding the search is not open (aria-expanded ${drawer})`);
    } finally {
      await page.setViewportSize(WIDE);
    }
    return `? opens the sheet (Escape and Close close it, focus given back); / focuses the message box; Ctrl+K the chat search (from the tasks page on a phone too, drawer opened); Ctrl+Shift+O a new chat from the tasks page`;
  });

  await step("phone size: navigation, settings tabs, traces table", ["api key prompt"], async () => {
    await page.setViewportSize(PHONE);
    try {
      await page.goto(`${url}/#/chat`);
      const toggle = page.getByRole("button", { name: "Pages" });
      await toggle.waitFor({ timeout: 10_000 });
      const nav = page.getByRole("navigation", { name: "Main" });
      check(!(await nav.isVisible()), "the page links show before the Pages menu is opened");
      await toggle.click();
      check((await toggle.getAttribute("aria-expanded")) === "true", "the Pages button does not say it is open");
      const links = nav.getByRole("link");
      const count = await links.count();
      check(count >= 6, `the menu lists ${count} pages`);
      for (let i = 0; i < count; i++) {
        const link = links.nth(i);
        const box = await link.boundingBox();
        const cut = await link.evaluate((node) => node.scrollWidth > node.clientWidth + 1);
        check(box && box.x >= 0 && box.x + box.width <= PHONE.width && box.y + box.height <= PHONE.height, `"${await link.innerText()}" is outside the screen: ${JSON.stringify(box)}`);
        check(!cut, `"${await link.innerText()}" is cut`);
      }
      await page.screenshot({ path: resolve(outDir, "phone-nav-390.png") });
      await nav.getByRole("link", { name: "Settings" }).click();
      await page.waitForFunction(() => location.hash.startsWith("#/settings"));
      check(!(await nav.isVisible()), "the menu stays open after picking a page");

      // The settings sections: one row that scrolls sideways, not rows of wrapped tabs.
      const tabs = page.getByRole("navigation", { name: "Settings sections" });
      await tabs.waitFor({ timeout: 10_000 });
      const row = await tabs.evaluate((node) => {
        const tops = new Set([...node.querySelectorAll("a")].map((a) => Math.round(a.getBoundingClientRect().top)));
        return { rows: tops.size, scrolls: node.scrollWidth > node.clientWidth, overflow: getComputedStyle(node).overflowX, right: node.getBoundingClientRect().right };
      });
      check(row.rows === 1, `the settings tabs take ${row.rows} rows`);
      check(!row.scrolls || row.overflow === "auto", `the settings tabs overflow without scrolling (${row.overflow})`);
      check(row.right <= PHONE.width, `the settings tabs end at ${row.right}px`);
      await page.screenshot({ path: resolve(outDir, "phone-settings-390.png") });

      // The traces table scrolls inside its frame; the page itself does not scroll sideways.
      await page.goto(`${url}/#/observability/traces`);
      const table = page.locator(".obs-table").first();
      await table.waitFor({ timeout: 20_000 });
      await page.waitForFunction(() => document.querySelectorAll(".obs-table tbody tr").length > 0, null, { timeout: 20_000 });
      const frame = await table.evaluate((node) => {
        const wrap = node.parentElement;
        const before = wrap.scrollLeft;
        wrap.scrollLeft = 10_000;
        const moved = wrap.scrollLeft - before;
        const lastHead = [...node.querySelectorAll("thead th")].pop().getBoundingClientRect();
        const box = wrap.getBoundingClientRect();
        wrap.scrollLeft = 0;
        return { overflow: getComputedStyle(wrap).overflowX, scrolls: wrap.scrollWidth > wrap.clientWidth, moved, right: box.right, lastRight: lastHead.right };
      });
      check(frame.right <= PHONE.width, `the traces table's frame ends at ${frame.right}px`);
      check(!frame.scrolls || (frame.overflow === "auto" && frame.moved > 0), `the traces table is cut: ${JSON.stringify(frame)}`);
      check(frame.lastRight <= frame.right + 1, `scrolled to the end, the last column ends at ${frame.lastRight}px past ${frame.right}px`);
      const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      check(over <= 0, `the traces page is ${over}px wider than the phone`);
      await page.screenshot({ path: resolve(outDir, "phone-traces-390.png") });
      return `${count} pages in the menu, settings tabs in one row (${row.scrolls ? "scrolling" : "fitting"}), traces table scrolls ${frame.moved}px`;
    } finally {
      await page.setViewportSize(WIDE);
    }
  });

  await step("pages accessible in light and dark", ["streamed text"], async () => {
    await page.setViewportSize(WIDE);
    const pages = [
      ["chat", `#/chat/${encodeURIComponent(chatSessionId)}`, '[data-testid="message-assistant"]'],
      ["settings", "#/settings/agent-runtime", "main form, main .tabs"],
      ["tasks", "#/tasks", "main h1, main h2"],
      ["observability", "#/observability", "main h1, main h2"],
      ["traces", "#/observability/traces", ".obs-table tbody tr"],
    ];
    for (const [name, hash, ready] of pages) {
      await page.goto(`${url}/${hash}`);
      await page.locator(ready).first().waitFor({ timeout: 20_000 });
      await page.waitForTimeout(300);
      try {
        await checkPageAxeInBothThemes(page, "body");
      } catch (error) {
        throw new StepFailed(`${name}: ${error.message}`);
      }
      await page.screenshot({ path: resolve(outDir, `axe-${name}-1440.png`) });
    }
    return `no serious or critical axe-core violation on ${pages.map(([name]) => name).join(", ")}, light and dark`;
  });

  await step("api key changed per browser", ["api key prompt"], async () => {
    await page.goto(`${url}/#/settings/this-browser`);
    const form = page.locator('form[data-form="ApiKey"]');
    await form.waitFor({ timeout: 10_000 });
    check((await form.locator('[data-testid="api-key-state"]').innerText()).includes(apiKey.slice(-4)), "the stored key is not shown as stored");
    await form.getByLabel("New API key").fill(apiKey);
    await form.getByRole("button", { name: "Save key" }).click();
    await form.locator('[data-testid="submit-status"][data-state="saved"]').waitFor();
    await page.screenshot({ path: resolve(outDir, "this-browser-1440.png") });
    // Another tab of the same browser uses the key without asking.
    const other = await context.newPage();
    await other.goto(`${url}/#/chat`);
    await other.locator('[data-testid="session-list"]').waitFor({ timeout: 15_000 });
    const asked = await other.getByRole("dialog", { name: "API key needed" }).isVisible();
    await other.close();
    check(!asked, "a second tab asked for the key again");
    return "saved from Settings → This browser; a second tab used it without asking";
  });

  await step("no outside requests", [], async () => {
    check(outsideRequests.length === 0, `the page asked outside the server: ${outsideRequests.slice(0, 5).join(", ")}`);
    check(consoleErrors.length === 0, `page errors: ${consoleErrors.slice(0, 3).join(" | ")}`);
    return "every request went to the gateway";
  });
} finally {
  await browser.close();
}

process.stdout.write(JSON.stringify({ steps: report }) + "\n");
process.exit(report.every((entry) => entry.ok) ? 0 : 1);
