// A first run in Debian's headless Chromium with playwright-core (from ui/node_modules), against a fresh
// stack whose model gateway lists none of the seeded 9Router ids. Started by test_first_run_browser.py,
// which owns the stack and runs this twice:
//
// - scenario "fresh": the seeded configuration. The notice names the unlisted default, the picker opens on
//   a listed model, one pick of another listed model, and the first message is answered;
// - scenario "preset": the researcher's and reviewer's overrides of the 9Router preset are now persisted
//   (the test wrote them). Settings → Agents marks both "not offered"; setting the researcher to inherit
//   there drops its badge at once; the chat's notice then fixes the default and the reviewer in one click,
//   the next message is answered, and Settings → Agents has no badge left, all without a page reload.
//
// usage: node first_run.mjs <config.json>
//   config: {url, apiKey, outDir, chromium, scenario, seededDefault, listed: [model ids], pick, answerPrefix, presetAgents}
// Prints one JSON report on stdout: {steps: [{step, ok, ms, detail}]}; exits 1 when a step failed.
import { chatHelpers, check, openDriver } from "./driver.mjs";

const { config, page, step, shot, finish } = await openDriver({ prefix: "first-run", viewport: { width: 1280, height: 900 } });
const { url, scenario, seededDefault, listed, pick, answerPrefix, presetAgents } = config;
const { assistants, apiGet, send, waitTurnOver } = chatHelpers(page, config);

const picker = () => page.getByTestId("model-picker");
const notice = () => page.getByTestId("model-notice");
const badges = () => page.getByTestId("unlisted-override");
// Navigation inside the app, as a user clicks it: no page load in between.
const mainLink = (name) => page.getByRole("navigation", { name: "Main" }).getByRole("link", { name, exact: true });
const settingsLink = (name) => page.getByRole("navigation", { name: "Settings sections" }).getByRole("link", { name, exact: true });
let loads = 0;
page.on("load", () => loads++);

/** A new chat's first message on `pick`, answered by the scripted model (which names the model it ran on). */
async function firstMessage(text) {
  await picker().selectOption(pick);
  check((await picker().inputValue()) === pick, `the picker did not take ${pick}`);
  await send(text);
  await page.waitForFunction(() => /#\/chat\/.+/.test(location.hash), null, { timeout: 15_000 });
  const answer = assistants().filter({ hasText: answerPrefix });
  await answer.first().waitFor({ timeout: 60_000 });
  await waitTurnOver();
  const said = await assistants().last().innerText();
  check(said.includes(`${answerPrefix} ${pick}`), `the answer "${said.slice(0, 160)}" was not made on ${pick}`);
  return said;
}

if (scenario === "fresh") {
  await step("unlisted default noticed", [], async () => {
    await page.goto(`${url}/#/chat`);
    await page.getByTestId("default-model-notice").waitFor({ timeout: 15_000 });
    const said = await notice().innerText();
    check(said.includes(seededDefault) && said.includes("not offered"), `the notice says "${said}"`);
    // The specialists inherit: no seeded override blocks the chat.
    check((await page.getByTestId("override-notice").count()) === 0, `the notice names an override: "${said}"`);
    const opened = await picker().inputValue();
    check(listed.includes(opened), `the picker opened on ${opened}, which the catalog does not list`);
    const options = await picker().locator("option").evaluateAll((nodes) => nodes.map((node) => node.value));
    check(JSON.stringify(options) === JSON.stringify(listed), `the picker offers ${options.join(", ")}`);
    await shot("fresh");
    return `default ${seededDefault} not offered, picker on ${opened}`;
  });

  await step("one model pick, first answer", ["unlisted default noticed"], async () => {
    const said = await firstMessage("hi");
    await shot("first-answer");
    return `answered on ${pick}: "${said.slice(0, 80)}"`;
  });
} else if (scenario === "preset") {
  await step("not offered badges", [], async () => {
    await page.goto(`${url}/#/settings/agents`);
    await page.locator('details[data-agent-id="reviewer"]').waitFor({ timeout: 15_000 });
    await badges().nth(presetAgents.length - 1).waitFor({ timeout: 15_000 });
    for (const agent of presetAgents) {
      const badge = page.locator(`details[data-agent-id="${agent}"]`).getByTestId("unlisted-override");
      check((await badge.count()) === 1, `${agent} has no "not offered" badge`);
    }
    check((await badges().count()) === presetAgents.length, `${await badges().count()} badges for ${presetAgents.length} overrides`);
    await shot("badges");
    return `${presetAgents.join(", ")} marked not offered`;
  });

  await step("inherit saved in settings drops the badge", ["not offered badges"], async () => {
    const loadsBefore = loads;
    const researcher = page.locator('details[data-agent-id="researcher"]');
    await researcher.locator("summary").click();
    await researcher.getByLabel("Model override").selectOption("");
    await researcher.getByRole("button", { name: "Save", exact: true }).click();
    await researcher.getByTestId("unlisted-override").waitFor({ state: "detached", timeout: 15_000 });
    check((await badges().count()) === presetAgents.length - 1, `${await badges().count()} badges left after one override was cleared`);
    check(loads === loadsBefore, "the page was reloaded");
    return "the researcher's badge went on save";
  });

  await step("one click fixes every unlisted setting", ["inherit saved in settings drops the badge"], async () => {
    const loadsBefore = loads;
    await mainLink("Chat").click();
    await page.getByTestId("override-notice").waitFor({ timeout: 15_000 });
    const said = await notice().innerText();
    const left = presetAgents.filter((agent) => agent !== "researcher");
    for (const agent of left) check(said.includes(`${agent}'s override`), `the notice does not name ${agent}: "${said}"`);
    check(!said.includes("researcher's override"), `the notice still names the researcher: "${said}"`);
    check(said.includes(seededDefault), `the notice does not name the default: "${said}"`);
    await picker().selectOption(pick);
    const fix = page.getByTestId("save-default-model");
    const label = await fix.innerText();
    check(label.includes(pick) && left.every((agent) => label.includes(agent)), `the button reads "${label}"`);
    await shot("notice");
    await fix.click();
    await notice().waitFor({ state: "detached", timeout: 15_000 });
    const models = await apiGet("/api/models");
    check(models.defaultModel === pick && models.defaultModelListed, `the default is ${models.defaultModel}`);
    check(models.unlistedModels.length === 0, `still unlisted: ${JSON.stringify(models.unlistedModels)}`);
    // The picker shows the new default as such.
    const option = await picker().locator(`option[value="${pick}"]`).innerText();
    check(option.includes("(default)"), `the picked model's option reads "${option}"`);
    await page.getByRole("button", { name: "New chat" }).click();
    await firstMessage("hi again");
    check(loads === loadsBefore, "the page was reloaded");
    return `"${label}" in one click, then answered on ${pick}`;
  });

  await step("no badge left", ["one click fixes every unlisted setting"], async () => {
    const loadsBefore = loads;
    await mainLink("Settings").click();
    await settingsLink("Agents").click();
    await page.locator('details[data-agent-id="reviewer"]').waitFor({ timeout: 15_000 });
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="unlisted-override"]').length === 0, null, { timeout: 15_000 });
    check(loads === loadsBefore, "the page was reloaded");
    await shot("no-badges");
    return "Settings → Agents marks nothing";
  });
} else {
  check(false, `unknown scenario ${scenario}`);
}

await finish();
