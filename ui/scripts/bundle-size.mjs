// Prints the built bundle's size (raw, gzipped, and as served: the precompressed brotli copy) and
// fails when the gzipped JavaScript is over budget (POPAGENT_UI_JS_BUDGET_KB, default 400).
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
// What a browser that accepts brotli transfers: the precompressed copy where there is one.
const served = (file, data) => {
  try {
    return readFileSync(file + ".br").length;
  } catch {
    return data.length;
  }
};
const totals = { js: [0, 0, 0], css: [0, 0, 0], other: [0, 0, 0] };
for (const file of files.filter((name) => !name.endsWith(".br") && !name.endsWith(".gz")).sort()) {
  const data = readFileSync(file);
  const gz = gzipSync(data, { level: 9 }).length;
  const br = served(file, data);
  const kind = file.endsWith(".js") ? "js" : file.endsWith(".css") ? "css" : "other";
  totals[kind][0] += data.length;
  totals[kind][1] += gz;
  totals[kind][2] += br;
  console.log(
    `  ${file.slice(dist.length + 1).padEnd(40)} ${kb(data.length).padStart(8)} KB  ${kb(gz).padStart(7)} KB gzipped  ${kb(br).padStart(7)} KB served`,
  );
}
console.log(
  `UI bundle: JavaScript ${kb(totals.js[0])} KB (${kb(totals.js[1])} KB gzipped, budget ${budgetKb} KB; ${kb(totals.js[2])} KB transferred as served, brotli), ` +
    `CSS ${kb(totals.css[0])} KB (${kb(totals.css[1])} KB gzipped; ${kb(totals.css[2])} KB transferred)`,
);
if (totals.js[1] > budgetKb * 1024) {
  console.error(`bundle-size: gzipped JavaScript ${kb(totals.js[1])} KB is over the ${budgetKb} KB budget`);
  process.exit(1);
}
