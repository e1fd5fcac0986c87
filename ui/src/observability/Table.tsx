import type { ReactNode } from "react";

/** A column heading: its text, or with `num` right-aligned figures, or with `hidden` a label for screen readers only. */
export type Column = string | { title: string; num?: boolean; hidden?: boolean };

/** A table of the observability pages; `rows` are its `<tr>`s, and `empty` (when given) is the one row shown when there are none. */
export function Table(props: { label?: string; busy?: boolean; columns: Column[]; rows: ReactNode[]; empty: string | null }) {
  return (
    <div className="obs-table-wrap">
      <table className="obs-table" aria-label={props.label} aria-busy={props.busy || undefined}>
        <thead>
          <tr>
            {props.columns.map((column) => {
              if (typeof column === "string") return <th key={column}>{column}</th>;
              if (column.hidden) return <th key={column.title} aria-label={column.title} />;
              return (
                <th key={column.title} className={column.num ? "num" : undefined}>
                  {column.title}
                </th>
              );
            })}
          </tr>
        </thead>
        <tbody>
          {props.rows}
          {props.empty !== null && props.rows.length === 0 ? (
            <tr>
              <td colSpan={props.columns.length} className="muted">
                {props.empty}
              </td>
            </tr>
          ) : null}
        </tbody>
      </table>
    </div>
  );
}
