// What the page drivers (memory.mjs, observability.mjs) share: Debian's headless Chromium through
// playwright-core (from ui/node_modules), the API key as the key prompt would have kept it, named
// steps that depend on earlier ones, and screenshots of a page that scrolls inside its main region.
// A driver prints one JSON report on stdout: {steps: [{step, ok, ms, detail}]}; exits 1 when a step failed.
import { mkdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(resolve(here, "../../ui/package.json"));
const { chromium } = require("playwright-core");

const AXE = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

class StepFailed extends Error {}
export function check(condition, message) {
  if (!condition) throw new StepFailed(message);
}

/** axe-core's WCAG 2 A/AA checks on what `selector` matches in `page`: fails the step with the violations, named.
 * Evaluated over the DevTools protocol, which the page's Content-Security-Policy does not govern (an inline
 * <script> tag would be refused by it, as it should be). */
export async function checkAxe(page, selector, { impacts = null } = {}) {
  if (!(await page.evaluate(() => "axe" in window))) await page.evaluate(AXE);
  const found = await page.evaluate(async ([scope, kept]) => {
    const result = await window.axe.run(
      { include: [...document.querySelectorAll(scope)].map((element) => element) },
      { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } },
    );
    // Each node with what axe measured (a contrast's colors and ratio), so a failure says what to change.
    const node = (n) => `${n.target.join(" ")}${n.any?.[0]?.message ? ` [${n.any[0].message}]` : ""}`;
    return result.violations
      .filter((v) => !kept || kept.includes(v.impact))
      .map((v) => `${v.id} (${v.impact}): ${v.nodes.map(node).join(", ")}`);
  }, [selector, impacts]);
  check(found.length === 0, `axe-core: ${found.join("; ")}`);
}

/** `checkAxe` on a whole page (`selector`) under the app's own Light and then Dark theme (`data-theme`,
 * as the header's Theme picker sets it), keeping only serious and critical violations; the page's
 * theme attribute is put back after. */
export async function checkPageAxeInBothThemes(page, selector) {
  const before = await page.evaluate(() => document.documentElement.getAttribute("data-theme"));
  try {
    for (const theme of ["light", "dark"]) {
      await page.evaluate((value) => document.documentElement.setAttribute("data-theme", value), theme);
      try {
        await checkAxe(page, selector, { impacts: ["serious", "critical"] });
      } catch (error) {
        throw new StepFailed(`${theme}: ${error.message}`);
      }
    }
  } finally {
    await page.evaluate((value) => {
      if (value === null) document.documentElement.removeAttribute("data-theme");
      else document.documentElement.setAttribute("data-theme", value);
    }, before);
  }
}

/** `checkAxe` in the light and then the dark color scheme (the page is left in light). */
export async function checkAxeInBothSchemes(page, selector) {
  await checkAxe(page, selector);
  await page.emulateMedia({ colorScheme: "dark" });
  try {
    await checkAxe(page, selector);
  } finally {
    await page.emulateMedia({ colorScheme: "light" });
  }
}

/** The config file named on the command line, a browser page logged in with its apiKey, and the step helpers.
 * Screenshots are `<outDir>/<prefix>-<name>.png`; `settleMs` waits after a resize before a shot. */
export async function openDriver({ prefix, viewport, settleMs = 0 }) {
  const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
  mkdirSync(config.outDir, { recursive: true });
  const report = [];
  const passed = new Set();
  const browser = await chromium.launch({
    executablePath: config.chromium || "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-sync"],
  });
  const context = await browser.newContext({ viewport });
  await context.addInitScript((key) => localStorage.setItem("popagent.apiKey", key), config.apiKey);
  const page = await context.newPage();
  const pageErrors = [];
  page.on("pageerror", (error) => pageErrors.push(error.message));

  async function step(name, needs, run) {
    const missing = needs.filter((need) => !passed.has(need));
    if (missing.length) {
      report.push({ step: name, ok: false, ms: 0, detail: `not run: needs ${missing.join(", ")}` });
      return;
    }
    const started = Date.now();
    try {
      const detail = await run();
      check(!pageErrors.length, `page errors: ${pageErrors.join("; ")}`);
      passed.add(name);
      report.push({ step: name, ok: true, ms: Date.now() - started, detail: detail ?? "" });
    } catch (error) {
      const text = String(error?.message ?? error).split("\n").slice(0, 8).join("\n");
      report.push({ step: name, ok: false, ms: Date.now() - started, detail: text });
      const failed = resolve(config.outDir, `${prefix}-failed-${name.replaceAll(" ", "-")}.png`);
      await page.screenshot({ path: failed, fullPage: true }).catch(() => undefined);
    }
  }

  // The page scrolls inside its main region, so a full-page shot is taken in a tall viewport.
  async function shot(name) {
    const current = page.viewportSize();
    const height = await page.evaluate(() => document.querySelector("main")?.scrollHeight ?? 0);
    await page.setViewportSize({ width: current.width, height: Math.min(Math.max(current.height, height + 60), 4000) });
    if (settleMs) await page.waitForTimeout(settleMs);
    await page.screenshot({ path: resolve(config.outDir, `${prefix}-${name}.png`) });
    await page.setViewportSize(current);
  }

  async function finish() {
    await browser.close();
    console.log(JSON.stringify({ steps: report }));
    process.exit(report.every((s) => s.ok) ? 0 : 1);
  }

  return { config, context, page, step, shot, finish };
}

/** The chat pieces the page drivers use: the message box, the assistant messages, a GET of the API with the
 * key, sending a message, and waiting for a turn to end (a failure the UI shows fails the step). */
export function chatHelpers(page, { url, apiKey }) {
  const composer = () => page.getByRole("textbox", { name: "Message", exact: true });
  const assistants = () => page.locator('[data-testid="message-assistant"]');
  async function apiGet(path) {
    const response = await fetch(`${url}${path}`, { headers: { "x-popagent-key": apiKey } });
    check(response.ok, `GET ${path} answered HTTP ${response.status}`);
    return response.json();
  }
  async function send(text) {
    await composer().fill(text);
    await composer().press("Enter");
  }
  async function waitTurnOver(timeout = 60_000) {
    await page.waitForFunction(
      () => ["ready", "error"].includes(document.querySelector('[data-testid="chat-status"]')?.getAttribute("data-status")),
      null,
      { timeout },
    );
    const failure = assistants().last().locator('[data-testid="message-failure"]');
    if (await failure.count()) check(false, `the turn failed: "${(await failure.innerText()).trim()}"`);
    const shown = page.locator('[data-testid="chat-error"]');
    if (await shown.count()) check(false, `the UI shows a failed turn: "${(await shown.innerText()).trim()}"`);
  }
  return { composer, assistants, apiGet, send, waitTurnOver };
}
