// Drives tool approvals in Debian's headless Chromium with playwright-core (from ui/node_modules),
// against a running stack whose supervisor asks before mastra_workspace_write_file. Started by
// test_approvals_ui.py, which owns the stack, the scripted model and the policy.
//
// usage: node approvals.mjs <config.json>
//   config: {url, apiKey, outDir, chromium, approvePrompt, approvePath, approveContent, approveAnswer,
//            denyPrompt, denyPath, denyContent, denyReason, denyAnswer, grantPrompt, grantPath, grantContent,
//            grantAnswer, notifyPrompt, notifyPath, notifyContent, notifyAnswer, policyReason}
// Prints one JSON report on stdout: {steps: [{step, ok, ms, detail}]}; exits 1 when a step failed.
import { check, checkAxe, openDriver } from "./driver.mjs";

const { config, context, page, step, shot, finish } = await openDriver({ prefix: "approvals", viewport: { width: 1280, height: 900 } });
const { url } = config;

// Headless Chromium's page is always visible and a notification leaves no trace the page can read, so
// before any app code runs: document.visibilityState/hidden answer "hidden" while the test says so, and
// the browser's own Notification is subclassed only to record what the app constructed and how often it
// asked for permission. The app's code path (notify.tsx) is unchanged: it calls the real constructor.
await context.addInitScript(() => {
  let hidden = false;
  for (const name of ["visibilityState", "hidden"]) {
    const real = Object.getOwnPropertyDescriptor(Document.prototype, name).get;
    Object.defineProperty(Document.prototype, name, {
      configurable: true,
      get() {
        if (!hidden) return real.call(this);
        return name === "hidden" ? true : "hidden";
      },
    });
  }
  window.__setPageHidden = (value) => {
    hidden = value;
    document.dispatchEvent(new Event("visibilitychange"));
  };
  const Real = window.Notification;
  if (!Real) return;
  const seen = { created: [], permissionRequests: 0 };
  window.__notificationsSeen = seen;
  class Recorded extends Real {
    constructor(title, options) {
      super(title, options);
      seen.created.push({ title, tag: options?.tag ?? null });
    }
    static requestPermission(...args) {
      seen.permissionRequests += 1;
      return Real.requestPermission(...args);
    }
  }
  window.Notification = Recorded;
});

/** What the page recorded since it loaded: the notifications it constructed and its permission requests. */
const notificationsSeen = () => page.evaluate(() => window.__notificationsSeen ?? { created: [], permissionRequests: 0 });
const notifyMe = () => card().getByTestId("notify-me");

const composer = () => page.getByRole("textbox", { name: "Message", exact: true });
const card = () => page.getByRole("region", { name: /^Approval needed:/ });

async function axe(selector) {
  await checkAxe(page, selector);
}

async function startChat(text) {
  await page.goto(`${url}/#/chat`);
  await page.getByRole("button", { name: "New chat" }).click();
  await page.waitForFunction(() => location.hash === "#/chat");
  await composer().fill(text);
  await composer().press("Enter");
  await page.waitForFunction(() => /#\/chat\/.+/.test(location.hash), null, { timeout: 15_000 });
  return decodeURIComponent(/#\/chat\/(.+)$/.exec(page.url())[1]);
}

/** The card of a write, with its path, content, and why it asks; its controls named for assistive technology. */
async function checkCard(path, content) {
  await card().waitFor({ timeout: 60_000 });
  check((await card().getByRole("heading").innerText()).includes("mastra_workspace_write_file"), "the card does not name the tool");
  const shownPath = await card().getByTestId("approval-path").innerText();
  check(shownPath === path, `the card shows the path "${shownPath}", not "${path}"`);
  const shownContent = await card().getByTestId("approval-content").innerText();
  check(shownContent.trim() === content.trim(), `the card shows the content "${shownContent}"`);
  const why = card().getByTestId("approval-reason");
  await why.waitFor({ timeout: 15_000 });
  const reason = await why.innerText();
  check(reason.includes(config.policyReason), `the card's reason reads "${reason}"`);
  check(reason.includes("approval policy"), `the card does not say the policy asked: "${reason}"`);
  for (const name of ["Approve", "Allow for this session", "Deny"]) {
    check((await card().getByRole("button", { name, exact: true }).count()) === 1, `no "${name}" button in the card`);
  }
  return reason;
}

let approveSession = null;

await step("approval card", [], async () => {
  approveSession = await startChat(config.approvePrompt);
  const reason = await checkCard(config.approvePath, config.approveContent);
  await axe('[data-testid="approval-card"], [data-testid="session-list"], [data-testid="session-grants"]');
  await card().getByRole("button", { name: "Deny", exact: true }).click();
  await axe('[data-testid="approval-card"]');
  await card().getByRole("button", { name: "Cancel" }).click();
  await shot("card");
  return reason;
});

await step("notify me asks for permission", ["approval card"], async () => {
  const before = await page.evaluate(() => Notification.permission);
  check(before === "default", `notification permission is "${before}" before anyone asked`);
  await notifyMe().waitFor({ timeout: 15_000 });
  check((await notifyMe().innerText()).trim() === "Notify me", `the button reads "${await notifyMe().innerText()}"`);
  // The browser's answer to the request the click makes (headless Chromium shows no prompt to click).
  await context.grantPermissions(["notifications"], { origin: new URL(url).origin });
  await notifyMe().click();
  await notifyMe().waitFor({ state: "detached", timeout: 15_000 });
  const seen = await notificationsSeen();
  check(seen.permissionRequests === 1, `the click asked for permission ${seen.permissionRequests} times, not once`);
  const after = await page.evaluate(() => Notification.permission);
  check(after === "granted", `notification permission is "${after}" after the click`);
  check(seen.created.length === 0, `notifications while the page was visible: ${JSON.stringify(seen.created)}`);
  return after;
});

await step("sidebar badge", ["approval card"], async () => {
  const item = page.locator(`[data-testid="session-item"][data-session-id="${approveSession}"]`);
  await item.getByTestId("approval-badge").waitFor({ timeout: 15_000 });
  return await item.getByTestId("approval-badge").innerText();
});

await step("approve", ["approval card"], async () => {
  await card().getByRole("button", { name: "Approve", exact: true }).click();
  const answer = page.locator('[data-testid="message-assistant"] [data-testid="message-text"]', { hasText: config.approveAnswer });
  await answer.waitFor({ timeout: 60_000 });
  const tool = page.locator('[data-testid="tool-call"][data-tool="mastra_workspace_write_file"]');
  const state = await tool.getAttribute("data-state");
  check(state === "output-available", `the write's part is "${state}", not output-available`);
  check((await card().count()) === 0, "the approval card is still shown after the call ran");
  // The badge goes with the answer (the next poll).
  const item = page.locator(`[data-testid="session-item"][data-session-id="${approveSession}"]`);
  await item.getByTestId("approval-badge").waitFor({ state: "detached", timeout: 15_000 });
  await shot("approved");
  return state;
});

await step("deny with a reason", [], async () => {
  await startChat(config.denyPrompt);
  await checkCard(config.denyPath, config.denyContent);
  await card().getByRole("button", { name: "Deny", exact: true }).click();
  await card().getByLabel("Reason for the model (optional)").fill(config.denyReason);
  await card().getByRole("button", { name: "Deny the call" }).click();
  const denied = page.getByTestId("approval-denied");
  await denied.waitFor({ timeout: 60_000 });
  const text = await denied.innerText();
  check(text.startsWith("Denied"), `the denied call reads "${text}"`);
  await page.getByTestId("approval-denied-reason").filter({ hasText: config.denyReason }).waitFor({ timeout: 15_000 });
  const answer = page.locator('[data-testid="message-assistant"] [data-testid="message-text"]', { hasText: config.denyAnswer });
  await answer.waitFor({ timeout: 60_000 });
  const state = await page.locator('[data-testid="tool-call"][data-tool="mastra_workspace_write_file"]').getAttribute("data-state");
  check(state === "output-denied", `the write's part is "${state}", not output-denied`);
  await axe('[data-testid="approval-denied"]');
  await shot("denied");
  // Permission granted (the step before), page visible: the request the card showed made no notification.
  const seen = await notificationsSeen();
  check(seen.created.length === 0, `a notification while the page was visible: ${JSON.stringify(seen.created)}`);
  // After a reload the stored part still says Denied, with the reason.
  await page.reload();
  await page.getByTestId("approval-denied-reason").filter({ hasText: config.denyReason }).waitFor({ timeout: 15_000 });
  return text;
});

await step("allow for this session, then revoke", [], async () => {
  await startChat(config.grantPrompt);
  await checkCard(config.grantPath, config.grantContent);
  await card().getByRole("button", { name: "Allow for this session", exact: true }).click();
  await page.locator('[data-testid="message-assistant"] [data-testid="message-text"]', { hasText: config.grantAnswer }).waitFor({ timeout: 60_000 });
  const grants = page.getByTestId("session-grants");
  await grants.locator("summary").click();
  const grant = grants.locator('[data-testid="grant"][data-tool="mastra_workspace_write_file"]');
  await grant.waitFor({ timeout: 15_000 });
  await axe('[data-testid="session-grants"]');
  await shot("grants");
  await grant.getByRole("button", { name: "Revoke mastra_workspace_write_file" }).click();
  await grants.getByTestId("no-grants").waitFor({ timeout: 15_000 });
  return "granted, listed, revoked";
});

await step("notification while hidden", ["notify me asks for permission"], async () => {
  const before = (await notificationsSeen()).created.length;
  await page.evaluate(() => window.__setPageHidden(true));
  await startChat(config.notifyPrompt);
  await checkCard(config.notifyPath, config.notifyContent);
  const shown = await page
    .waitForFunction((count) => window.__notificationsSeen.created.length > count, before, { timeout: 15_000 })
    .then(() => true, () => false);
  check(shown, "no notification for the approval request while the page was hidden");
  await page.evaluate(() => window.__setPageHidden(false));
  // Answer it, so the turn ends; the renders that brings make no second notification.
  await card().getByRole("button", { name: "Approve", exact: true }).click();
  await page.locator('[data-testid="message-assistant"] [data-testid="message-text"]', { hasText: config.notifyAnswer }).waitFor({ timeout: 60_000 });
  const created = (await notificationsSeen()).created.slice(before);
  check(created.length === 1, `${created.length} notifications for one approval request: ${JSON.stringify(created)}`);
  const expected = "popagent needs your approval: mastra_workspace_write_file";
  check(created[0].title === expected, `the notification reads "${created[0].title}", not "${expected}"`);
  check(created[0].tag === "popagent-approval", `the notification's tag is "${created[0].tag}"`);
  return created[0].title;
});

await step("policy editor shows the rule", [], async () => {
  await page.goto(`${url}/#/settings/agents`);
  const agent = page.locator('details[data-agent-id="popagent"]');
  await agent.locator("summary").click();
  const rules = agent.getByTestId("approval-rule");
  await rules.first().waitFor();
  check((await rules.count()) === 1, `${await rules.count()} rules shown, the policy has 1`);
  const target = await rules.first().getByLabel("Rule 1 tool").inputValue();
  check(target === "mastra_workspace_write_file", `the rule's tool reads "${target}"`);
  const decision = await rules.first().getByLabel("Rule 1 decision").inputValue();
  check(decision === "ask", `the rule's decision reads "${decision}"`);
  await agent.getByRole("button", { name: "Add an exception (unless)" }).click();
  await axe('[data-testid="approval-rules"]');
  await agent.getByRole("button", { name: "Remove exception 1 of rule 1" }).click();
  await shot("policy");
  return `${target}: ${decision}`;
});

await finish();
