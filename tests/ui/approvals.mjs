// Drives tool approvals in Debian's headless Chromium with playwright-core (from ui/node_modules),
// against a running stack whose supervisor asks before mastra_workspace_write_file. Started by
// test_approvals_ui.py, which owns the stack, the scripted model and the policy.
//
// usage: node approvals.mjs <config.json>
//   config: {url, apiKey, outDir, chromium, approvePrompt, approvePath, approveContent, approveAnswer,
//            denyPrompt, denyPath, denyContent, denyReason, denyAnswer, policyReason}
// Prints one JSON report on stdout: {steps: [{step, ok, ms, detail}]}; exits 1 when a step failed.
import { check, checkAxe, openDriver } from "./driver.mjs";

const { config, page, step, shot, finish } = await openDriver({ prefix: "approvals", viewport: { width: 1280, height: 900 } });
const { url } = config;

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
