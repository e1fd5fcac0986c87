import { useId, useState, type FormEvent } from "react";
import { DEFAULT_WINDOW, type Window } from "./time";

/** A filter form's state with keyset pages: the draft being edited, the filters applied, the time window and
 * the cursors of the pages before the one shown (Newer pops one). Applying filters or a window starts again
 * at the first page. */
export function usePagedFilter<F>(initial: F) {
  const [draft, setDraft] = useState<F>(initial);
  const [filters, setFilters] = useState<F>(initial);
  const [window, setWindowState] = useState<Window>(DEFAULT_WINDOW);
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

export function Pager(props: { page: number; onNewer: () => void; next: string | null; onOlder: (next: string | null) => void }) {
  return (
    <div className="obs-pager">
      <button type="button" className="small" disabled={props.page === 1} onClick={props.onNewer}>
        Newer
      </button>
      <span className="muted small-text">Page {props.page}</span>
      <button type="button" className="small" disabled={!props.next} onClick={() => props.onOlder(props.next)}>
        Older
      </button>
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
