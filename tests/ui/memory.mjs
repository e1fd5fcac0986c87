// Drives the memory pages in Debian's headless Chromium with playwright-core (from ui/node_modules),
// against a running stack. Started by test_memory_browser.py, which owns the stack and ran the turns
// whose observations this reads.
//
// usage: node memory.mjs <config.json>
//   config: {url, apiKey, outDir, chromium, sessionTitle, observation, tokensSaved, memoryId, memoryContent,
//            settings: [{name, description}]}
// Prints one JSON report on stdout: {steps: [{step, ok, ms, detail}]}; exits 1 when a step failed.
import { check, openDriver } from "./driver.mjs";

const { config, page, step, shot, finish } = await openDriver({ prefix: "memory", viewport: { width: 1280, height: 900 } });
const { url, sessionTitle, observation, tokensSaved, memoryId, memoryContent, settings } = config;

const digits = (text) => text.replace(/\D/g, "");
const figure = (label) => page.locator("dl.memory-figures dt", { hasText: label }).locator("xpath=following-sibling::dd[1]");

await step("session memory view", [], async () => {
  await page.goto(`${url}/#/chat`);
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Memory", exact: true }).click();
  await page.getByRole("heading", { name: "Conversation memory", level: 1 }).waitFor();
  await page.getByRole("link", { name: sessionTitle }).click();
  await page.getByRole("heading", { name: "Observation log", level: 2 }).waitFor();
  const log = page.locator("ol.observation-log > li");
  check((await log.count()) >= 1, "the observation log is empty");
  const text = await page.locator("ol.observation-log").innerText();
  check(text.includes(observation), `the log does not show "${observation}"`);
  check(text.includes("Observation"), "an entry is not labelled as an observation");
  const compaction = await figure("Last compaction").innerText();
  check(compaction && compaction !== "none yet", `the last compaction reads "${compaction}"`);
  const saved = await figure("Tokens saved per request").innerText();
  check(digits(saved.split("(")[0]) === String(tokensSaved), `tokens saved reads "${saved}", the API says ${tokensSaved}`);
  await shot("session");
  return `${await log.count()} entries, ${saved.split("(")[0].trim()} tokens saved, compacted ${compaction}`;
});

const item = () => page.locator(`[data-testid="memory-item"][data-memory-id="${memoryId}"]`);

await step("kind and pin edited", [], async () => {
  await page.goto(`${url}/#/settings/memories`);
  await item().waitFor();
  check((await item().getAttribute("data-kind")) === "fact", "the memory does not start as a fact");
  check((await item().getAttribute("data-pinned")) === "false", "the memory starts pinned");
  await item().getByRole("button", { name: "Edit" }).click();
  await item().getByLabel("Kind").selectOption({ label: "Preference" });
  await item().getByLabel("Pinned").check();
  await item().getByRole("button", { name: "Save" }).click();
  await page.locator(`[data-testid="memory-item"][data-memory-id="${memoryId}"][data-kind="preference"][data-pinned="true"]`).waitFor();
  check((await item().getByTestId("memory-kind").innerText()) === "Preference", "the kind badge does not say Preference");
  await item().getByTestId("memory-pinned").waitFor();
  // Persisted: a reload shows it from the server.
  await page.reload();
  await item().waitFor();
  check((await item().getAttribute("data-kind")) === "preference", "after a reload the kind is not preference");
  check((await item().getAttribute("data-pinned")) === "true", "after a reload the memory is not pinned");
  check((await item().locator(".memory-content").innerText()) === memoryContent, "the content changed");
  await shot("memories");
});

await step("readable validation error", ["kind and pin edited"], async () => {
  await item().getByRole("button", { name: "Edit" }).click();
  await item().getByLabel("Memory", { exact: true }).fill("");
  await item().getByRole("button", { name: "Save" }).click();
  const error = item().getByTestId("field-error");
  await error.waitFor();
  const message = await error.innerText();
  check(message === "Cannot be empty.", `the field error reads "${message}"`);
  check(!/string_too_short|String should|pydantic/i.test(await item().innerText()), "a raw validation message is shown");
  await item().getByRole("button", { name: "Cancel" }).click();
  await item().locator(".memory-content").waitFor();
  check((await item().locator(".memory-content").innerText()) === memoryContent, "Cancel did not keep the stored content");
  return message;
});

// The settings page shows each description as a sentence: camelCase names in words, a capital first.
function humanize(name) {
  const words = name.replace(/([a-z0-9])([A-Z])/g, "$1 $2").replace(/Ms$/, " (ms)").toLowerCase();
  return words.charAt(0).toUpperCase() + words.slice(1);
}
function sentence(text) {
  const plain = text.trim().replace(/\b[a-z]+(?:[A-Z][a-z0-9]*)+\b/g, (name) => humanize(name).toLowerCase());
  return plain.charAt(0).toUpperCase() + plain.slice(1);
}

await step("settings descriptions", [], async () => {
  await page.goto(`${url}/#/settings/memory`);
  await page.locator('[data-form="MemorySettingsPatch"]').waitFor();
  const missing = [];
  for (const { name, description } of settings) {
    const hint = page.locator(`[data-form="MemorySettingsPatch"] [data-field="${name}"] .field-hint`);
    if ((await hint.count()) !== 1) {
      missing.push(`${name}: no description shown`);
      continue;
    }
    const shown = await hint.innerText();
    if (!shown.startsWith(sentence(description))) missing.push(`${name}: "${shown}" is not "${sentence(description)}"`);
  }
  check(missing.length === 0, missing.join("; "));
  return `${settings.length} settings described`;
});

await finish();
