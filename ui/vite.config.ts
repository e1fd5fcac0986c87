import { defineConfig } from "vite";

// The gateway serves dist/ at `/`; `npm run dev` proxies /api to a running stack
// (POPAGENT_URL, default http://127.0.0.1:8080).
export default defineConfig({
  base: "/",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    reportCompressedSize: false,
    assetsInlineLimit: 0,
    // One chunk is fine here; scripts/bundle-size.mjs enforces the real (gzipped) budget.
    chunkSizeWarningLimit: 1024,
    rolldownOptions: {
      onwarn(warning, warn) {
        // swr's "use client" directive is for server-component bundlers; this app has none.
        if (warning.code === "MODULE_LEVEL_DIRECTIVE") return;
        warn(warning);
      },
    },
  },
  server: {
    proxy: { "/api": process.env.POPAGENT_URL ?? "http://127.0.0.1:8080" },
  },
});
