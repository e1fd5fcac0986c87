import { useId, useState, type FormEvent, type ReactNode } from "react";
import { messageOf, type Loaded } from "../common/useLoad";
import { DEFAULT_WINDOW, type Window } from "./time";
import { WindowPicker } from "./WindowPicker";

/** A filter form's state with keyset pages: the draft being edited, the filters applied, the time window and
 * the cursors of the pages before the one shown (Newer pops one). Applying filters or a window starts again
 * at the first page. */
export function usePagedFilter<F>(initial: F, initialWindow: Window = DEFAULT_WINDOW) {
  const [draft, setDraft] = useState<F>(initial);
  const [filters, setFilters] = useState<F>(initial);
  const [window, setWindowState] = useState<Window>(initialWindow);
  const [cursors, setCursors] = useState<string[]>([]);
  return {
    draft,
    setDraft,
    filters,
    window,
    cursors,
    cursor: cursors.length ? cursors[cursors.length - 1] : undefined,
    setWindow(next: Window) {
      setCursors([]);
      setWindowState(next);
    },
    apply(event: FormEvent) {
      event.preventDefault();
      setCursors([]);
      setFilters(draft);
    },
    newer() {
      setCursors(cursors.slice(0, -1));
    },
    older(next: string | null) {
      if (next) setCursors([...cursors, next]);
    },
  };
}

/** What the pager and the filter form use of `usePagedFilter`, whatever its filters. */
type Paged = Pick<ReturnType<typeof usePagedFilter<unknown>>, "cursors" | "newer" | "older" | "apply" | "window" | "setWindow">;

/** Newer and Older over the pages of `paged`; `next` is the cursor of the page after the one shown. */
export function Pager(props: { paged: Paged; next: string | null }) {
  const { paged, next } = props;
  const page = paged.cursors.length + 1;
  return (
    <div className="obs-pager">
      <button type="button" className="small" disabled={page === 1} onClick={paged.newer}>
        Newer
      </button>
      <span className="muted small-text">Page {page}</span>
      <button type="button" className="small" disabled={!next} onClick={() => paged.older(next)}>
        Older
      </button>
    </div>
  );
}

/** A filter form: its fields, the time window and Apply; below it, the list's load error. */
export function FilterForm(props: { label: string; paged: Paged; list: Pick<Loaded<unknown>, "error">; children: ReactNode }) {
  const { paged, list } = props;
  return (
    <>
      <form className="obs-filters" onSubmit={paged.apply} aria-label={props.label}>
        {props.children}
        <WindowPicker value={paged.window} onChange={paged.setWindow} />
        <button type="submit" className="primary small">
          Apply
        </button>
      </form>
      {list.error ? <p className="error-text">{messageOf(list.error)}</p> : null}
    </>
  );
}

/** One labelled select of a filter form: `options` are [value, text] pairs. */
export function SelectFilter(props: { label: string; value: string; options: [string, string][]; onChange: (value: string) => void }) {
  const id = useId();
  return (
    <div className="obs-field">
      <label htmlFor={id}>{props.label}</label>
      <select id={id} value={props.value} onChange={(e) => props.onChange(e.target.value)}>
        {props.options.map(([value, text]) => (
          <option key={value} value={value}>
            {text}
          </option>
        ))}
      </select>
    </div>
  );
}

/** One labelled text input of a filter form. */
export function TextFilter(props: { label: string; value: string; placeholder: string; mono?: boolean; onChange: (value: string) => void }) {
  const id = useId();
  return (
    <div className="obs-field">
      <label htmlFor={id}>{props.label}</label>
      <input
        id={id}
        className={props.mono ? "mono" : undefined}
        value={props.value}
        placeholder={props.placeholder}
        onChange={(e) => props.onChange(e.target.value)}
      />
    </div>
  );
}
