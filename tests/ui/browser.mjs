// Drives popagent's web UI in the system's headless Chromium (Debian's /usr/bin/chromium)
// with playwright-core from ui/node_modules, against a running stack. Started by
// test_browser.py, which owns the stack, the scripted model server and the hook receiver.
//
// usage: node browser.mjs <config.json>
//   config: {url, apiKey, outDir, denyReason}
// Prints one JSON report on stdout: {steps: [{step, ok, ms, detail}]}; exits 1 when a step failed.
// Steps that need an earlier one are reported as failed ("not run: needs ...") when it failed,
// so every missing piece is named in one run.
import { readFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(resolve(here, "../../ui/package.json"));
const { chromium } = require("playwright-core");

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
const { url, apiKey, outDir, denyReason } = config;
mkdirSync(outDir, { recursive: true });

const WIDE = { width: 1440, height: 900 };
const NARROW = { width: 375, height: 812 };

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
const chatStatuses = [];
page.on("response", (response) => {
  if (new URL(response.url()).pathname === "/api/chat") chatStatuses.push(response.status());
});
page.on("request", (request) => {
  if (!request.url().startsWith(url) && !request.url().startsWith("data:")) outsideRequests.push(request.url());
});

async function step(name, needs, run) {
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
async function waitTurnOver(timeout = 60_000) {
  await page.waitForFunction(
    () => {
      const status = document.querySelector('[data-testid="chat-status"]')?.getAttribute("data-status");
      return status === "ready" || status === "error";
    },
    null,
    { timeout },
  );
  const shown = page.locator('[data-testid="chat-error"]');
  if (await shown.count()) {
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

try {
  await step("api key prompt", [], async () => {
    await page.goto(url);
    const dialog = page.getByRole("dialog", { name: "API key needed" });
    await dialog.waitFor({ timeout: 15_000 });
    await dialog.getByRole("textbox", { name: "API key" }).fill(apiKey);
    await dialog.getByRole("button", { name: "Use this key" }).click();
    await dialog.waitFor({ state: "hidden" });
    const stored = await page.evaluate(() => sessionStorage.getItem("popagent.apiKey"));
    check(stored === apiKey, "the key is not kept in sessionStorage");
    // Every /api request now carries it: the sessions list loads without another prompt.
    await page.locator('[data-testid="session-list"]').waitFor();
    return "asked once, kept for the tab";
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
    await page.locator('[data-testid="save-default-model"]').click();
    await notice.waitFor({ state: "detached", timeout: 10_000 });
    const { body: after } = await apiGet("/api/models");
    check(after.defaultModel === picked && after.defaultModelListed, `the default is ${after.defaultModel} after saving ${picked}`);
    return `default ${before.defaultModel} not offered; ${picked} picked and saved as the default in one click`;
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
    for (const model of models.models) check(options.includes(model), `model ${model} is not offered`);
    const window = models.contextWindows[models.defaultModel];
    const shown = await page.locator('[data-testid="context-window"]').innerText();
    if (window) check(shown === `${formatTokens(window)} context`, `context window shown as "${shown}", expected ${window} tokens`);
    return `default ${models.defaultModel} preselected, ${shown}`;
  });

  await step("streamed text", ["api key prompt"], async () => {
    await page.getByRole("button", { name: "New chat" }).click();
    await page.waitForFunction(() => /#\/chat\/.+/.test(location.hash));
    chatSessionId = currentSessionId();
    // Shift+Enter is a new line, not a send.
    await composer().fill("line one");
    await composer().press("Shift+Enter");
    await composer().pressSequentially("line two");
    check((await composer().inputValue()) === "line one\nline two", "Shift+Enter did not add a line");
    check((await page.locator('[data-testid^="message-"]').count()) === 0, "Shift+Enter sent the message");
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
    return `${pieces.length + 1} pieces, composer fixed at y=${[...tops][0]}`;
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

  await step("revision conflict", ["streamed text"], async () => {
    // Another tab saves first: the UI's next save is stale, and it must show the server's copy.
    const path = `/api/sessions/${encodeURIComponent(chatSessionId)}`;
    const { body: server } = await apiGet(path);
    const edited = { id: `edited-${Date.now()}`, role: "user", parts: [{ type: "text", text: "Edited in another tab." }] };
    const put = await fetch(`${url}${path}`, {
      method: "PUT",
      headers: { "x-popagent-key": apiKey, "content-type": "application/json" },
      body: JSON.stringify({ revision: server.revision, messages: [...server.messages, edited] }),
    });
    check(put.status === 200, `the other tab's save answered ${put.status}`);
    await send("Hello again.");
    await waitTurnOver();
    const banner = page.locator('[data-testid="revision-conflict"]');
    await banner.waitFor({ timeout: 15_000 });
    check((await page.locator('[data-testid="save-state"]').getAttribute("data-state")) === "failed", "the stale save is not reported");
    await banner.locator("summary").click();
    check((await banner.innerText()).includes("Edited in another tab."), "the banner does not show the server's copy");
    await banner.getByRole("button", { name: "Load the server's copy" }).click();
    await banner.waitFor({ state: "detached" });
    const users = await page.locator('[data-testid="message-user"]').allInnerTexts();
    check(users.some((text) => text.includes("Edited in another tab.")), "the server's copy was not loaded");
    // The server records every turn itself (issue 22): its copy has the other tab's edit and this turn.
    check(users.some((text) => text.includes("Hello again.")), "the server's copy lost the turn");
    return `conflict at revision ${server.revision + 1} shown and resolved by loading the server's copy`;
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

  await step("rename and archive", ["api key prompt"], async () => {
    await page.goto(`${url}/#/chat`);
    const previous = await page.evaluate(() => location.hash);
    await page.getByRole("button", { name: "New chat" }).click();
    await page.waitForFunction((before) => /#\/chat\/.+/.test(location.hash) && location.hash !== before, previous);
    const id = currentSessionId();
    const item = page.locator(`[data-testid="session-item"][data-session-id="${id}"]`);
    await item.waitFor();
    await item.getByRole("button", { name: /^Rename/ }).click();
    const input = item.getByRole("textbox", { name: "New title" });
    check(await input.evaluate((node) => node === document.activeElement), "the rename box did not get focus");
    await input.fill("Renamed by the browser test");
    await input.press("Enter");
    await item.getByText("Renamed by the browser test").waitFor();
    await item.getByRole("img", { name: "title locked" }).waitFor();
    let { body: session } = await apiGet(`/api/sessions/${encodeURIComponent(id)}`);
    check(session.title === "Renamed by the browser test" && session.titleLocked === true, "the rename did not lock the title");
    await item.getByRole("button", { name: /^Archive/ }).click();
    await item.waitFor({ state: "detached" });
    await page.getByRole("button", { name: "Archived", exact: true }).click();
    await page.locator('[data-testid="session-list"][data-archived="true"]').waitFor();
    await item.waitFor();
    ({ body: session } = await apiGet(`/api/sessions/${encodeURIComponent(id)}`));
    check(session.archived === true, "the session is not archived on the server");
    await item.getByRole("button", { name: /^Restore/ }).click();
    await item.waitFor({ state: "detached" });
    await page.getByRole("button", { name: "Active", exact: true }).click();
    await item.waitFor();
    return `session ${id} renamed (locked), archived and restored`;
  });

  await step("delete with confirmation", ["api key prompt"], async () => {
    const previous = await page.evaluate(() => location.hash);
    await page.getByRole("button", { name: "New chat" }).click();
    await page.waitForFunction((before) => /#\/chat\/.+/.test(location.hash) && location.hash !== before, previous);
    const id = currentSessionId();
    const item = page.locator(`[data-testid="session-item"][data-session-id="${id}"]`);
    await item.getByRole("button", { name: /^Delete/ }).click();
    const dialog = page.getByRole("dialog", { name: "Delete this chat permanently?" });
    await dialog.waitFor();
    await dialog.getByRole("button", { name: "Cancel" }).click();
    check((await item.count()) === 1, "cancelling the confirmation deleted the chat");
    await item.getByRole("button", { name: /^Delete/ }).click();
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
    check(/greater than or equal to 2/.test(message), `unexpected field error "${message}"`);
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
    check((await error.count()) === 0, "the field error stayed after a valid save");
    ({ body: settings } = await apiGet("/api/settings/agent-runtime"));
    check(settings.supervisorMaxSteps === valid, `the saved value is ${settings.supervisorMaxSteps}, not ${valid}`);
    return `shown beside the field: "${message}"; ${valid} saved`;
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
    await form.getByLabel(/^Cron/).fill("0 3 * * *");
    await form.getByRole("button", { name: "Create schedule" }).click();
    const item = page.locator('[data-testid="schedule-item"]').filter({ hasText: "Browser test nightly" });
    await item.waitFor({ timeout: 10_000 });
    const { body } = await apiGet("/api/schedules");
    const stored = body.schedules.find((schedule) => schedule.name === "Browser test nightly");
    check(stored && stored.nextRuns.length > 0, "the server has no next runs for the schedule");
    const shown = await item.locator('[data-testid="next-runs"] time').evaluateAll((nodes) => nodes.map((node) => node.getAttribute("datetime")));
    check(shown.length > 0 && shown.every((run, index) => run === stored.nextRuns[index]), "the next runs shown are not the server's");
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

  await step("autonomy page", ["api key prompt"], async () => {
    await page.goto(`${url}/#/autonomy`);
    await page.getByRole("heading", { name: "Signals" }).waitFor({ timeout: 10_000 });
    await page.locator('[data-testid="revision-list"]').waitFor({ timeout: 10_000 });
    return "signals and revisions sections shown";
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
