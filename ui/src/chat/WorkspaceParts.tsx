// How the workspace tools' results read in a conversation (Mastra's registry keys):
// a read shows its path and line range, an edit or write its unified diff, a command its
// command line, exit code and collapsible output, a listing a tree.
import { record } from "./meta";

export const WORKSPACE_PREFIX = "mastra_workspace_";

export function isWorkspaceTool(name: string): boolean {
  return name.startsWith(WORKSPACE_PREFIX);
}

const VIEWS = new Set(["read_file", "edit_file", "write_file", "execute_command", "get_process_output", "kill_process", "list_files", "grep"]);

/** Whether `WorkspaceResult` has a view of its own for this tool (stat, mkdir and delete use the generic one). */
export function hasWorkspaceView(name: string): boolean {
  return isWorkspaceTool(name) && VIEWS.has(name.slice(WORKSPACE_PREFIX.length));
}

function text(value: unknown): string {
  return typeof value === "string" ? value : "";
}

function num(value: unknown): number | null {
  return typeof value === "number" ? value : null;
}

/** The one-line summary of a workspace call, from its input (and output once there). */
export function workspaceSummary(name: string, input: unknown, output: unknown): string {
  const args = record(input);
  const result = record(output);
  const tool = name.slice(WORKSPACE_PREFIX.length);
  const path = text(result.path) || text(args.path) || ".";
  if (tool === "read_file") {
    const start = num(result.startLine);
    const end = num(result.endLine);
    return start !== null && end !== null ? `${path}:${start}–${end}` : path;
  }
  if (tool === "execute_command") {
    const exit = num(result.exitCode);
    const command = text(args.command);
    if ("processId" in result && result.running === true) return `$ ${command} · background ${text(result.processId)}`;
    return exit === null ? `$ ${command}` : `$ ${command} · exit ${exit}`;
  }
  if (tool === "grep") return `/${text(args.pattern)}/ ${text(args.include)}`.trim();
  if (tool === "get_process_output" || tool === "kill_process") return text(args.process_id);
  return path;
}

export function DiffView({ diff }: { diff: string }) {
  if (!diff) return <p className="muted">No change.</p>;
  return (
    <pre className="diff" data-testid="workspace-diff">
      {diff.split("\n").map((line, index) => {
        const kind = line.startsWith("+++") || line.startsWith("---") ? "meta" : line.startsWith("@@") ? "hunk" : line[0] === "+" ? "add" : line[0] === "-" ? "del" : "ctx";
        return (
          <span key={index} className={`diff-${kind}`}>
            {line}
            {"\n"}
          </span>
        );
      })}
    </pre>
  );
}

type TreeNode = { name: string; type: string; size: number; children: Map<string, TreeNode> };

function buildTree(entries: unknown[]): TreeNode {
  const root: TreeNode = { name: ".", type: "directory", size: 0, children: new Map() };
  for (const raw of entries) {
    const entry = record(raw);
    const parts = text(entry.path).split("/").filter(Boolean);
    let node = root;
    parts.forEach((part, index) => {
      let child = node.children.get(part);
      if (!child) {
        child = { name: part, type: "directory", size: 0, children: new Map() };
        node.children.set(part, child);
      }
      if (index === parts.length - 1) {
        child.type = text(entry.type) || "file";
        child.size = num(entry.size) ?? 0;
      }
      node = child;
    });
  }
  return root;
}

function TreeList({ node }: { node: TreeNode }) {
  const children = [...node.children.values()];
  if (!children.length) return null;
  return (
    <ul className="tree">
      {children.map((child) => (
        <li key={child.name} data-type={child.type}>
          <span className={`tree-${child.type}`}>
            {child.name}
            {child.type === "directory" ? "/" : child.type === "symlink" ? " →" : ""}
          </span>
          {child.type === "file" ? <span className="muted"> {child.size} B</span> : null}
          <TreeList node={child} />
        </li>
      ))}
    </ul>
  );
}

/** The result of a workspace tool, or null when the generic view should show it. */
export function WorkspaceResult({ name, input, output }: { name: string; input: unknown; output: unknown }) {
  const result = record(output);
  const tool = name.slice(WORKSPACE_PREFIX.length);
  if (tool === "read_file") {
    const total = num(result.totalLines);
    return (
      <div className="tool-section" data-testid="workspace-read">
        <span className="tool-label">
          {text(result.path)} · lines {num(result.startLine)}–{num(result.endLine)}
          {total !== null ? ` of ${total}` : ""}
        </span>
        <pre>{text(result.content)}</pre>
      </div>
    );
  }
  if (tool === "edit_file" || tool === "write_file") {
    return (
      <div className="tool-section" data-testid="workspace-edit">
        <span className="tool-label">
          {text(result.path)}
          {result.created === true ? " (new file)" : ""}
        </span>
        <DiffView diff={text(result.diff)} />
      </div>
    );
  }
  if (tool === "execute_command" || tool === "get_process_output" || tool === "kill_process") {
    const exit = num(result.exitCode);
    const command = text(result.command) || text(record(input).command);
    const omitted = num(result.omittedBytes) ?? 0;
    return (
      <div className="tool-section" data-testid="workspace-command">
        <code className="command-line">$ {command}</code>
        <span className="command-meta">
          {result.running === true ? (
            <span className="badge pending">running</span>
          ) : exit === null ? (
            <span className="badge bad">{result.timedOut === true ? "timed out" : "killed"}</span>
          ) : (
            <span className={`badge ${exit === 0 ? "ok" : "bad"}`} data-testid="exit-code">
              exit {exit}
            </span>
          )}
          {num(result.durationMs) !== null ? <span className="muted"> {num(result.durationMs)} ms</span> : null}
        </span>
        {"output" in result ? (
          <details className="command-output" open={exit !== 0}>
            <summary>
              output{omitted ? ` (${omitted} bytes left out)` : ""}
            </summary>
            <pre>{text(result.output)}</pre>
          </details>
        ) : null}
      </div>
    );
  }
  if (tool === "list_files") {
    const entries = Array.isArray(result.entries) ? (result.entries as unknown[]) : [];
    return (
      <div className="tool-section" data-testid="workspace-tree">
        <span className="tool-label">
          {text(result.path) || "."}
          {result.truncated === true ? " (truncated)" : ""}
        </span>
        <TreeList node={buildTree(entries)} />
      </div>
    );
  }
  if (tool === "grep") {
    const matches = Array.isArray(result.matches) ? (result.matches as unknown[]).map(text) : [];
    return (
      <div className="tool-section" data-testid="workspace-grep">
        <span className="tool-label">
          {matches.length} match{matches.length === 1 ? "" : "es"}
          {result.truncated === true ? " (truncated)" : ""}
        </span>
        <pre>{matches.join("\n")}</pre>
      </div>
    );
  }
  return null;
}
