// Drives the observability pages in Debian's headless Chromium with playwright-core (from
// ui/node_modules), against a running stack. Started by test_observability_browser.py, which
// owns the stack and ran the turns whose traces this reads.
//
// usage: node observability.mjs <config.json>
//   config: {url, apiKey, outDir, chromium, sessionId, traceId, delegationTraceId, failedTraceId, model, services}
// Prints one JSON report on stdout: {steps: [{step, ok, ms, detail}]}; exits 1 when a step failed.
import { check, openDriver } from "./driver.mjs";

const WIDE = { width: 1440, height: 900 };
const NARROW = { width: 375, height: 812 };
// uPlot redraws on resize: a shot waits 150 ms after the viewport grows.
const { config, context, page, step, shot, finish } = await openDriver({ prefix: "observability", viewport: WIDE, settleMs: 150 });
const { url, sessionId, traceId, failedTraceId, model, services } = config;
const statValue = (label) =>
  page.locator(".obs-stat").filter({ has: page.locator(".obs-stat-label", { hasText: new RegExp(`^${label}$`) }) }).locator(".obs-stat-value");

await step("overview", [], async () => {
  await page.goto(`${url}/#/chat`);
  // From the main navigation, which loads the page's code on demand.
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Observability" }).click();
  await page.getByRole("heading", { name: "Observability", level: 1 }).waitFor();
  await statValue("Turns").waitFor();
  const turns = Number(await statValue("Turns").innerText());
  check(turns >= 3, `the overview counts ${turns} turns, not the 3 the test ran`);
  const failed = Number(await statValue("Failed turns").innerText());
  check(failed >= 1, `the overview counts ${failed} failed turns`);
  const cost = await statValue("Cost").innerText();
  check(/^\$\d/.test(cost), `the overview shows no cost: "${cost}"`);
  // uPlot draws each chart on a canvas.
  const charts = page.locator(".obs-chart");
  check((await charts.count()) === 2, "the overview has not two charts");
  for (let i = 0; i < 2; i++) {
    const box = await charts.nth(i).locator("canvas").boundingBox();
    check(box && box.width > 200 && box.height > 100, `chart ${i} has no drawn canvas`);
  }
  const tokens = page.getByRole("table").filter({ has: page.getByRole("columnheader", { name: "Cached" }) });
  const priced = tokens.getByRole("row").filter({ hasText: model });
  check((await priced.count()) >= 1, `no token row for ${model}`);
  check(/\$\d/.test(await priced.first().innerText()), `the ${model} row has no cost`);
  const exporters = page.getByRole("table", { name: "Exporters by process" });
  await exporters.getByRole("row").nth(services.length).waitFor();
  const text = await exporters.innerText();
  const missingServices = services.filter((service) => !text.includes(service));
  check(!missingServices.length, `the exporters table lacks ${missingServices.join(", ")}`);
  await shot("overview-1440");
  return `${turns} turns, ${failed} failed, cost ${cost}`;
});

await step("overview figures link to the turns they count", ["overview"], async () => {
  const fresh = await context.newPage();
  try {
    await fresh.goto(`${url}/#/observability`);
    const failedStat = fresh.locator("a.obs-stat-link").filter({ hasText: /Failed turns$/ });
    await failedStat.waitFor();
    const failed = Number(await failedStat.locator(".obs-stat-value").innerText());
    await failedStat.click();
    await fresh.waitForURL(/#\/observability\/traces\?.*kind=turns.*status=error|#\/observability\/traces\?.*status=error.*kind=turns/);
    const table = fresh.getByRole("table", { name: "Traces" });
    await fresh.waitForFunction(() => !document.querySelector('table[aria-label="Traces"][aria-busy]'));
    await table.locator(`a[href$="${failedTraceId}"]`).waitFor();
    const rows = await table.locator("tbody tr").count();
    check(rows === failed, `the overview counts ${failed} failed turns, the traces list shows ${rows}`);
    check((await table.locator(".badge.bad").count()) === rows, "a listed turn is not marked failed");
    // A session id is a link to that session's traces.
    const sessionLink = table.locator('a[href*="sessionId="]').first();
    check(/^#\/observability\/traces\?sessionId=/.test((await sessionLink.getAttribute("href")) ?? ""), "a session id is no link to its traces");
    // The UI's own requests (this page's polls among them) are no turns: "every request" shows them.
    const filters = fresh.getByRole("form", { name: "Trace filters" });
    check((await filters.getByLabel("Show").inputValue()) === "turns", "the traces list does not show turns by default");
    await filters.getByLabel("Status").selectOption("");
    await filters.getByLabel("Show").selectOption("all");
    await filters.getByRole("button", { name: "Apply" }).click();
    await table.locator("td.mono", { hasText: /^GET \/api\// }).first().waitFor();
    return `${failed} failed turns, listed alike`;
  } finally {
    await fresh.close();
  }
});

await step("traces filtered by session and status", ["overview"], async () => {
  await page.getByRole("navigation", { name: "Observability" }).getByRole("link", { name: "Traces" }).click();
  const filters = page.getByRole("form", { name: "Trace filters" });
  await filters.getByLabel("Status").selectOption("error");
  await filters.getByRole("button", { name: "Apply" }).click();
  const table = page.getByRole("table", { name: "Traces" });
  await page.waitForFunction(() => !document.querySelector('table[aria-label="Traces"][aria-busy]'));
  const rows = table.locator("tbody tr");
  await rows.first().waitFor();
  const failedLinks = await table.locator(`a[href$="${failedTraceId}"]`).count();
  check(failedLinks === 1, "the failed turn's trace is not listed under Failed");
  check((await table.locator(`a[href$="${traceId}"]`).count()) === 0, "an ok trace is listed under Failed");
  check((await table.locator(".badge.bad").count()) === (await rows.count()), "a listed trace is not marked failed");

  await filters.getByLabel("Status").selectOption("");
  await filters.getByLabel("Session").fill(sessionId);
  await filters.getByRole("button", { name: "Apply" }).click();
  await table.locator(`a[href$="${traceId}"]`).waitFor();
  check((await rows.count()) === 1, `the session filter lists ${await rows.count()} traces, not 1`);
  return "failed and by-session lists";
});

await step("traces paged", ["traces filtered by session and status"], async () => {
  const fresh = await context.newPage();
  try {
    // The three chat turns are the traces with a supervisor span (every API request is a trace too).
    await fresh.goto(`${url}/#/observability/traces?agentId=popagent&limit=1`);
    const table = fresh.getByRole("table", { name: "Traces" });
    const firstLink = table.locator("tbody tr a").first();
    await firstLink.waitFor();
    const seen = [await firstLink.getAttribute("href")];
    const older = fresh.getByRole("button", { name: "Older" });
    // Three turns ran: three pages of one, each a different trace, and no fourth.
    for (let pageNumber = 2; pageNumber <= 3; pageNumber++) {
      check(await older.isEnabled(), `no page ${pageNumber}`);
      await older.click();
      await fresh.getByText(`Page ${pageNumber}`).waitFor();
      await fresh.waitForFunction((previous) => {
        const link = document.querySelector('table[aria-label="Traces"] tbody tr a');
        return link && link.getAttribute("href") !== previous;
      }, seen[seen.length - 1]);
      seen.push(await firstLink.getAttribute("href"));
    }
    check(new Set(seen).size === 3, `the pages repeat a trace: ${seen}`);
    await fresh.waitForFunction(() => !document.querySelector('table[aria-label="Traces"][aria-busy]'));
    check(!(await older.isEnabled()), "a page after the last trace");
    await fresh.getByRole("button", { name: "Newer" }).click();
    await fresh.getByText("Page 2").waitFor();
    await fresh.waitForFunction((href) => document.querySelector('table[aria-label="Traces"] tbody tr a')?.getAttribute("href") === href, seen[1]);
    return "3 pages of 1";
  } finally {
    await fresh.close();
  }
});

await step("waterfall from the list", ["traces filtered by session and status"], async () => {
  await page.getByRole("table", { name: "Traces" }).locator(`a[href$="${traceId}"]`).click();
  await page.waitForURL(new RegExp(`#/observability/traces/${traceId}$`));
  const spans = page.getByRole("list", { name: "Spans" });
  await spans.locator(".obs-span-row").first().waitFor();
  const seen = await spans.locator(".obs-span-row").evaluateAll((rows) => rows.map((r) => [r.dataset.span, r.dataset.service]));
  const processes = new Set(seen.map(([, service]) => service));
  for (const service of ["popagent-gateway", "popagent-agent-runner", "popagent-hooks"]) {
    check(processes.has(service), `the waterfall has no span of ${service} (has ${[...processes].join(", ")})`);
  }
  const names = seen.map(([name]) => name);
  for (const name of ["agent.run", "model.generation", "tool.call", "hook.dispatch"]) {
    check(names.includes(name), `the waterfall has no ${name} span`);
  }
  // The first span is chosen; choosing the tool call shows its attributes.
  await spans.locator('.obs-span-row[data-span="tool.call"]').first().click();
  const details = page.getByRole("region", { name: "tool.call" });
  const attributes = details.getByRole("table", { name: "Span attributes" });
  const tool = attributes.getByRole("row").filter({ hasText: "gen_ai.tool.name" });
  check((await tool.innerText()).includes("getTime"), "the tool call's attributes do not name getTime");
  check((await details.innerText()).includes("popagent-agent-runner"), "the tool call's service is not shown");
  // Each bar sits within the track, in start order of the tree.
  const bars = await spans.locator(".obs-span-bar").evaluateAll((els) => els.map((e) => parseFloat(e.style.left)));
  check(bars.every((left) => left >= 0 && left < 100), "a span bar is outside its track");
  await shot("trace-1440");
  return `${seen.length} spans over ${processes.size} processes`;
});

await step("waterfall from its URL", ["waterfall from the list"], async () => {
  const fresh = await context.newPage();
  try {
    await fresh.goto(`${url}/#/observability/traces/${failedTraceId}`);
    const rows = fresh.getByRole("list", { name: "Spans" }).locator(".obs-span-row");
    await rows.first().waitFor();
    check((await fresh.locator(".obs-span-row.failed").count()) >= 1, "the failed trace shows no failed span");
    await fresh.goto(`${url}/#/observability/traces/${"0".repeat(32)}`);
    await fresh.locator(".error-text").waitFor();
    check(/no stored span/i.test(await fresh.locator(".error-text").innerText()), "an unknown trace is not said to be unknown");
  } finally {
    await fresh.close();
  }
});

await step("logs by level and trace", ["waterfall from the list"], async () => {
  await page.getByRole("navigation", { name: "Observability" }).getByRole("link", { name: "Logs" }).click();
  const filters = page.getByRole("form", { name: "Log filters" });
  await filters.getByLabel("Level").selectOption("warning");
  await filters.getByRole("button", { name: "Apply" }).click();
  const logs = page.getByRole("list", { name: "Logs" });
  await logs.locator(".obs-log").first().waitFor();
  const levels = await logs.locator(".obs-log .badge").allInnerTexts();
  check(levels.every((level) => ["warning", "error", "critical"].includes(level)), `levels under warning: ${levels}`);
  await filters.getByLabel("Trace").fill(failedTraceId);
  await filters.getByRole("button", { name: "Apply" }).click();
  await page.waitForFunction(
    (id) => {
      const items = [...document.querySelectorAll(".obs-logs .obs-log")];
      return items.length > 0 && items.every((item) => item.querySelector(`a[href$="${id}"]`));
    },
    failedTraceId,
    { timeout: 15_000 },
  );
  const text = await logs.innerText();
  check(/turn failed/.test(text), "the failed turn's warning is not among its trace's logs");
  check(text.includes("popagent-agent-runner"), "the log's service is not shown");
  await shot("logs-1440");
  // A log's trace link opens the waterfall.
  await logs.locator(`a[href$="${failedTraceId}"]`).first().click();
  await page.getByRole("list", { name: "Spans" }).locator(".obs-span-row").first().waitFor();
  return `${levels.length} warning+ records`;
});

await step("narrow screens", ["overview", "waterfall from the list"], async () => {
  await page.setViewportSize(NARROW);
  await page.goto(`${url}/#/observability`);
  await statValue("Turns").waitFor();
  await page.locator(".obs-chart canvas").first().waitFor();
  // Neither the document nor the page's scrolling region is wider than the screen (tables scroll in their own box).
  const overflow = await page.evaluate(() => {
    const main = document.querySelector("main");
    return Math.max(
      document.documentElement.scrollWidth - document.documentElement.clientWidth,
      main ? main.scrollWidth - main.clientWidth : 0,
    );
  });
  check(overflow <= 1, `the overview is ${overflow}px wider than the 375px screen`);
  await shot("overview-375");
  await page.goto(`${url}/#/observability/traces/${traceId}`);
  await page.getByRole("list", { name: "Spans" }).locator(".obs-span-row").first().waitFor();
  await shot("trace-375");
});

await finish();
