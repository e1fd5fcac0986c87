// Prints the built bundle's size (raw and gzipped) and fails when the gzipped JavaScript
// is over budget (POPAGENT_UI_JS_BUDGET_KB, default 400).
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const dist = resolve(dirname(fileURLToPath(import.meta.url)), "..", "dist");
const budgetKb = Number(process.env.POPAGENT_UI_JS_BUDGET_KB || 400);

function walk(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : [path];
  });
}

let files;
try {
  files = walk(dist);
} catch {
  console.error(`bundle-size: no build at ${dist} (run \`npm run build\`)`);
  process.exit(1);
}
const kb = (bytes) => (bytes / 1024).toFixed(1);
const totals = { js: [0, 0], css: [0, 0], other: [0, 0] };
for (const file of files.sort()) {
  const data = readFileSync(file);
  const gz = gzipSync(data, { level: 9 }).length;
  const kind = file.endsWith(".js") ? "js" : file.endsWith(".css") ? "css" : "other";
  totals[kind][0] += data.length;
  totals[kind][1] += gz;
  console.log(`  ${file.slice(dist.length + 1).padEnd(40)} ${kb(data.length).padStart(8)} KB  ${kb(gz).padStart(7)} KB gzipped`);
}
console.log(`UI bundle: JavaScript ${kb(totals.js[0])} KB (${kb(totals.js[1])} KB gzipped, budget ${budgetKb} KB), CSS ${kb(totals.css[0])} KB (${kb(totals.css[1])} KB gzipped)`);
if (totals.js[1] > budgetKb * 1024) {
  console.error(`bundle-size: gzipped JavaScript ${kb(totals.js[1])} KB is over the ${budgetKb} KB budget`);
  process.exit(1);
}
