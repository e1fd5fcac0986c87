// Syntax highlighting for code blocks: lowlight (highlight.js grammars as a tree, no HTML
// strings). Each grammar is its own chunk, fetched the first time a block in that language shows.
import type { Element, ElementContent, Root } from "hast";
import type { LanguageFn } from "highlight.js";
import { createLowlight } from "lowlight";

type Loader = () => Promise<{ default: LanguageFn }>;

const GRAMMARS: Record<string, Loader> = {
  bash: () => import("highlight.js/lib/languages/bash"),
  c: () => import("highlight.js/lib/languages/c"),
  cpp: () => import("highlight.js/lib/languages/cpp"),
  css: () => import("highlight.js/lib/languages/css"),
  diff: () => import("highlight.js/lib/languages/diff"),
  dockerfile: () => import("highlight.js/lib/languages/dockerfile"),
  go: () => import("highlight.js/lib/languages/go"),
  ini: () => import("highlight.js/lib/languages/ini"),
  java: () => import("highlight.js/lib/languages/java"),
  javascript: () => import("highlight.js/lib/languages/javascript"),
  json: () => import("highlight.js/lib/languages/json"),
  makefile: () => import("highlight.js/lib/languages/makefile"),
  markdown: () => import("highlight.js/lib/languages/markdown"),
  python: () => import("highlight.js/lib/languages/python"),
  rust: () => import("highlight.js/lib/languages/rust"),
  shell: () => import("highlight.js/lib/languages/shell"),
  sql: () => import("highlight.js/lib/languages/sql"),
  typescript: () => import("highlight.js/lib/languages/typescript"),
  xml: () => import("highlight.js/lib/languages/xml"),
  yaml: () => import("highlight.js/lib/languages/yaml"),
};

const ALIASES: Record<string, string> = {
  sh: "bash", zsh: "bash", console: "shell", js: "javascript", jsx: "javascript", mjs: "javascript",
  ts: "typescript", tsx: "typescript", py: "python", rs: "rust", golang: "go", html: "xml", svg: "xml",
  yml: "yaml", toml: "ini", md: "markdown", patch: "diff", docker: "dockerfile", "c++": "cpp", h: "c",
};

const lowlight = createLowlight();
const loading = new Map<string, Promise<boolean>>();

/** The grammar's name for a fence's info string, or null when none is bundled for it. */
export function grammarFor(language: string): string | null {
  const name = language.toLowerCase();
  const canonical = ALIASES[name] ?? name;
  return canonical in GRAMMARS ? canonical : null;
}

/** Loads the grammar once; resolves false when there is none. */
export function loadGrammar(name: string): Promise<boolean> {
  if (lowlight.registered(name)) return Promise.resolve(true);
  let pending = loading.get(name);
  if (!pending) {
    const loader = GRAMMARS[name];
    pending = loader
      ? loader().then(
          (module) => {
            lowlight.register(name, module.default);
            return true;
          },
          () => false,
        )
      : Promise.resolve(false);
    loading.set(name, pending);
  }
  return pending;
}

export function isLoaded(name: string): boolean {
  return lowlight.registered(name);
}

/** The highlighted tree of `code` (a registered grammar). */
export function highlight(name: string, code: string): Root {
  return lowlight.highlight(name, code);
}

export type { Element, ElementContent };
