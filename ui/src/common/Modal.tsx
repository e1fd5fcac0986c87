import { useEffect, useId, useRef, type ReactNode } from "react";

/** A modal <dialog>: the browser traps focus inside it and gives it back when it closes. */
export function Modal(props: {
  open: boolean;
  title: string;
  onCancel?: () => void;
  children: ReactNode;
  className?: string;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  const titleId = useId();
  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    if (props.open && !dialog.open) dialog.showModal();
    if (!props.open && dialog.open) dialog.close();
  }, [props.open]);
  return (
    <dialog
      ref={ref}
      aria-labelledby={titleId}
      className={`modal ${props.className ?? ""}`}
      onCancel={(event) => {
        event.preventDefault();
        props.onCancel?.();
      }}
    >
      <h2 id={titleId} className="modal-title">
        {props.title}
      </h2>
      {props.open ? props.children : null}
    </dialog>
  );
}
