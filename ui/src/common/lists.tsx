// The pieces of the list pages (tasks, schedules, signals, revisions): a titled list with Refresh,
// and the actions on its items, whose failure shows as one banner above the lists.
import { useState, type ReactNode } from "react";
import { messageOf, type Loaded } from "./useLoad";
import { LoadError } from "./ErrorText";

/** Runs an action on a listed item, then reloads; a failure is kept as "Could not <what>: <reason>". */
export function useActions(reload: () => Promise<unknown>) {
  const [actionError, setActionError] = useState<string | null>(null);
  const act = async (what: string, run: () => Promise<unknown>) => {
    setActionError(null);
    try {
      await run();
    } catch (error) {
      setActionError(`Could not ${what}: ${messageOf(error)}`);
    }
    await reload();
  };
  const banner = actionError ? (
    <p role="alert" className="banner bad">
      {actionError}
    </p>
  ) : null;
  return { act, banner };
}

/** A titled list loaded from the API: heading, `controls` and Refresh, then `children` (a create form),
 * the load error, and the items or the `empty` note. */
export function ListSection<Item>(props: {
  id: string;
  title: string;
  /** What failed to load, in "Could not load <noun>". */
  noun: string;
  list: Pick<Loaded<unknown>, "error" | "reload">;
  items: Item[] | undefined;
  empty: string;
  testId: string;
  controls?: ReactNode;
  children?: ReactNode;
  renderItem: (item: Item) => ReactNode;
}) {
  const headingId = `${props.id}-heading`;
  return (
    <section aria-labelledby={headingId} className="stack">
      <div className="section-head">
        <h2 id={headingId}>{props.title}</h2>
        {props.controls}
        <button type="button" className="ghost small" onClick={() => void props.list.reload()}>
          Refresh
        </button>
      </div>
      {props.children}
      <LoadError what={props.noun} error={props.list.error} />
      <ul className="task-list" data-testid={props.testId}>
        {props.items?.length === 0 ? <li className="muted">{props.empty}</li> : null}
        {props.items?.map(props.renderItem)}
      </ul>
    </section>
  );
}
