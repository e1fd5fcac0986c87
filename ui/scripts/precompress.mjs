// Writes a brotli (.br) and a gzip (.gz) copy next to each compressible file of the build, where
// smaller: the gateway serves them to clients that accept them (services/gateway/.../ui.py), so
// nothing is compressed per request.
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, extname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { brotliCompressSync, constants, gzipSync } from "node:zlib";

const dist = resolve(dirname(fileURLToPath(import.meta.url)), "..", "dist");
const COMPRESSIBLE = new Set([".js", ".mjs", ".css", ".html", ".svg", ".json", ".txt", ".map", ".webmanifest"]);
// Below this a compressed copy saves less than its headers cost.
const MIN_BYTES = 1024;

function walk(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : [path];
  });
}

let written = 0;
for (const file of walk(dist)) {
  if (!COMPRESSIBLE.has(extname(file))) continue;
  const data = readFileSync(file);
  if (data.length < MIN_BYTES) continue;
  const copies = {
    ".br": brotliCompressSync(data, {
      params: { [constants.BROTLI_PARAM_QUALITY]: 11, [constants.BROTLI_PARAM_SIZE_HINT]: data.length },
    }),
    ".gz": gzipSync(data, { level: 9 }),
  };
  for (const [suffix, copy] of Object.entries(copies)) {
    if (copy.length < data.length) {
      writeFileSync(file + suffix, copy);
      written += 1;
    }
  }
}
console.log(`precompress: ${written} compressed copies in ${dist}`);
