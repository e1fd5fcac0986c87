// A model's answer as Markdown (react-markdown + remark-gfm), loaded lazily by Parts.tsx.
// Safety: raw HTML in the text is never rendered (react-markdown has no rehype-raw here),
// link addresses pass react-markdown's URL filter and only http(s)/mailto become links,
// and images become links (no request leaves for a model-chosen address).
// Streaming: half-received Markdown (an open fence, `**bold`, a link without its address)
// is closed by remend, Streamdown's self-healing pass, before each render.
import { Fragment, createElement, memo, useEffect, useState, type ReactNode } from "react";
import ReactMarkdown, { type Components } from "react-markdown";
import remarkGfm from "remark-gfm";
import remend from "remend";
import { CopyButton } from "../common/CopyButton";
import { grammarFor, highlight, isLoaded, loadGrammar, type ElementContent } from "./highlight";

function safeHref(url: string | undefined): string | undefined {
  return url && /^(https?:|mailto:)/i.test(url) ? url : undefined;
}

function renderTree(nodes: ElementContent[]): ReactNode {
  return nodes.map((node, index) => {
    if (node.type === "text") return node.value;
    if (node.type !== "element") return null;
    const className = Array.isArray(node.properties.className) ? node.properties.className.join(" ") : undefined;
    return createElement(node.tagName === "span" ? "span" : Fragment, { key: index, ...(className ? { className } : {}) }, renderTree(node.children));
  });
}

function CodeBlock({ language, code }: { language: string; code: string }) {
  const grammar = grammarFor(language);
  const [ready, setReady] = useState(() => (grammar ? isLoaded(grammar) : false));
  useEffect(() => {
    if (!grammar || ready) return;
    let live = true;
    void loadGrammar(grammar).then((ok) => live && setReady(ok));
    return () => {
      live = false;
    };
  }, [grammar, ready]);
  const body = grammar && ready ? renderTree(highlight(grammar, code).children as ElementContent[]) : code;
  return (
    <div className="code-block" data-testid="code-block" data-language={language || "text"} data-highlighted={grammar && ready ? "true" : "false"}>
      <div className="code-head">
        <span className="muted">{language || "text"}</span>
        <CopyButton text={code} label="Copy code" />
      </div>
      <pre>
        <code className={`hljs${grammar ? ` language-${grammar}` : ""}`}>{body}</code>
      </pre>
    </div>
  );
}

const components: Components = {
  a: ({ href, children }) => {
    const target = safeHref(href);
    return target ? (
      <a href={target} target="_blank" rel="noopener noreferrer nofollow">
        {children}
      </a>
    ) : (
      <span>{children}</span>
    );
  },
  img: ({ src, alt }) => {
    const target = safeHref(typeof src === "string" ? src : undefined);
    return target ? (
      <a href={target} target="_blank" rel="noopener noreferrer nofollow">
        {alt || target}
      </a>
    ) : (
      <span>{alt}</span>
    );
  },
  table: ({ children }) => (
    <div className="table-wrap">
      <table>{children}</table>
    </div>
  ),
  pre: ({ children }) => <>{children}</>,
  code: ({ className, children }) => {
    const match = /language-([\w+#-]+)/.exec(className ?? "");
    const text = String(children ?? "");
    // A fenced block (it has a language or spans lines); else inline code.
    if (match || text.includes("\n")) return <CodeBlock language={match?.[1] ?? ""} code={text.replace(/\n$/, "")} />;
    return <code className="inline-code">{children}</code>;
  },
};

const plugins = [remarkGfm];

function MarkdownView({ text, streaming }: { text: string; streaming: boolean }) {
  return (
    <div className="markdown" data-testid="markdown">
      <ReactMarkdown remarkPlugins={plugins} components={components} skipHtml>
        {streaming ? remend(text) : text}
      </ReactMarkdown>
    </div>
  );
}

export default memo(MarkdownView);
