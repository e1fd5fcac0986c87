// The editor of an agent's tool approval policy (`toolApproval`, docs/approvals.md), a custom input
// of the agent's PATCH form: each rule names a tool or a group, a decision, and optional
// "unless" argument patterns. The form saves the whole list with the agent; the server's 422
// reason shows beside this field.
import { useEffect, useId, useState } from "react";
import type { FieldInputProps } from "../common/forms";
import { APPROVAL_GROUPS, RULE_DECISIONS, type ApprovalRule, type RuleDecision } from "./api";

type Row = { kind: "tool" | "group"; target: string; decision: RuleDecision | string; unless: [string, string][] };

const GROUP_HELP: Record<string, string> = {
  "workspace-write": "write, edit, mkdir, delete",
  shell: "execute command, process output, kill process",
  browser: "bifrostNavigator, useBrowserSecret",
  secrets: "useBrowserSecret",
  delegation: "every delegation-eligible specialist",
};

function rowsOf(value: unknown): Row[] {
  if (!Array.isArray(value)) return [];
  return value.map((raw) => {
    const rule = (raw ?? {}) as ApprovalRule;
    const group = typeof rule.group === "string" && rule.group ? rule.group : null;
    return {
      kind: group ? "group" : "tool",
      target: group ?? (typeof rule.tool === "string" ? rule.tool : ""),
      decision: rule.decision ?? "ask",
      unless: Object.entries(rule.unless ?? {}).map(([name, pattern]) => [name, String(pattern)] as [string, string]),
    };
  });
}

/** The rules as the API takes them: a tool or a group, the decision, `unless` only when it names an argument. */
function rulesOf(rows: Row[]): ApprovalRule[] {
  return rows.map((row) => {
    const unless = Object.fromEntries(row.unless.filter(([name]) => name.trim()).map(([name, pattern]) => [name.trim(), pattern]));
    return {
      ...(row.kind === "group" ? { group: row.target } : { tool: row.target }),
      decision: row.decision as RuleDecision,
      ...(Object.keys(unless).length ? { unless } : {}),
    };
  });
}

export function RulesEditor({ input, knownTools }: { input: FieldInputProps; knownTools: string[] }) {
  const [rows, setRows] = useState<Row[]>(() => rowsOf(input.value));
  const base = useId().replace(/:/g, "");
  // The form's value changed from outside (Discard, a save): start again from it.
  const outside = JSON.stringify(rulesOf(rowsOf(input.value)));
  useEffect(() => {
    setRows((current) => (JSON.stringify(rulesOf(current)) === outside ? current : rowsOf(JSON.parse(outside))));
  }, [outside]);
  const change = (next: Row[]) => {
    setRows(next);
    input.onChange(rulesOf(next));
  };
  const update = (index: number, patch: Partial<Row>) => change(rows.map((row, at) => (at === index ? { ...row, ...patch } : row)));
  const tools = [...new Set([...knownTools, ...rows.filter((row) => row.kind === "tool" && row.target).map((row) => row.target)])];

  return (
    <div id={input.id} role="group" aria-describedby={input.describedBy || undefined} className="rules-editor" data-testid="approval-rules">
      {rows.length === 0 ? <p className="muted small-text">No rule: every tool the agent has runs without asking.</p> : null}
      <ol className="rule-list">
        {rows.map((row, index) => {
          const id = `${base}-${index}`;
          const n = index + 1;
          return (
            <li key={index} className="rule" data-testid="approval-rule">
              <div className="rule-line">
                <label className="visually-hidden" htmlFor={`${id}-kind`}>
                  Rule {n} applies to
                </label>
                <select
                  id={`${id}-kind`}
                  value={row.kind}
                  onChange={(event) => {
                    const kind = event.target.value as Row["kind"];
                    update(index, { kind, target: kind === "group" ? APPROVAL_GROUPS[0] : (knownTools[0] ?? "") });
                  }}
                >
                  <option value="tool">Tool</option>
                  <option value="group">Group</option>
                </select>
                <label className="visually-hidden" htmlFor={`${id}-target`}>
                  Rule {n} {row.kind}
                </label>
                <select id={`${id}-target`} value={row.target} onChange={(event) => update(index, { target: event.target.value })}>
                  {row.kind === "group"
                    ? [...new Set([...APPROVAL_GROUPS, row.target])].map((group) => (
                        <option key={group} value={group}>
                          {GROUP_HELP[group] ? `${group} (${GROUP_HELP[group]})` : group}
                        </option>
                      ))
                    : [...(row.target ? [] : [""]), ...tools].map((tool) => (
                        <option key={tool} value={tool}>
                          {tool || "(pick a tool)"}
                        </option>
                      ))}
                </select>
                <label className="visually-hidden" htmlFor={`${id}-decision`}>
                  Rule {n} decision
                </label>
                <select id={`${id}-decision`} value={row.decision} onChange={(event) => update(index, { decision: event.target.value })}>
                  {RULE_DECISIONS.map((decision) => (
                    <option key={decision} value={decision}>
                      {decision === "ask" ? "ask a person" : decision === "deny" ? "deny" : "allow"}
                    </option>
                  ))}
                </select>
                <button type="button" className="ghost small" aria-label={`Remove rule ${n}`} onClick={() => change(rows.filter((_, at) => at !== index))}>
                  Remove
                </button>
              </div>
              {row.unless.map(([name, pattern], at) => (
                <div key={at} className="rule-unless">
                  <span className="muted small-text">unless</span>
                  <label className="visually-hidden" htmlFor={`${id}-u${at}-name`}>
                    Rule {n} exception {at + 1} argument
                  </label>
                  <input
                    id={`${id}-u${at}-name`}
                    placeholder="argument (e.g. command)"
                    value={name}
                    onChange={(event) =>
                      update(index, { unless: row.unless.map((pair, k) => (k === at ? [event.target.value, pair[1]] : pair)) })
                    }
                  />
                  <span className="muted small-text">fully matches</span>
                  <label className="visually-hidden" htmlFor={`${id}-u${at}-pattern`}>
                    Rule {n} exception {at + 1} regular expression
                  </label>
                  <input
                    id={`${id}-u${at}-pattern`}
                    className="mono"
                    placeholder="regular expression"
                    value={pattern}
                    maxLength={500}
                    onChange={(event) =>
                      update(index, { unless: row.unless.map((pair, k) => (k === at ? [pair[0], event.target.value] : pair)) })
                    }
                  />
                  <button
                    type="button"
                    className="ghost small"
                    aria-label={`Remove exception ${at + 1} of rule ${n}`}
                    onClick={() => update(index, { unless: row.unless.filter((_, k) => k !== at) })}
                  >
                    Remove
                  </button>
                </div>
              ))}
              <button type="button" className="ghost small" onClick={() => update(index, { unless: [...row.unless, ["", ""]] })}>
                Add an exception (unless)
              </button>
            </li>
          );
        })}
      </ol>
      <button
        type="button"
        className="small"
        data-testid="add-approval-rule"
        onClick={() => change([...rows, { kind: "tool", target: knownTools[0] ?? "", decision: "ask", unless: [] }])}
      >
        Add a rule
      </button>
      <p className="muted small-text">
        Of the rules that apply to a call, the strictest decides (deny, then ask, then allow); with no rule, the call runs. An
        exception exempts a call whose every named argument is a string the expression matches in full.
      </p>
    </div>
  );
}
