import * as Dialog from "@radix-ui/react-dialog";
import { useRef, type ReactNode } from "react";

/** A modal dialog (Radix): focus is trapped inside and given back when it closes; Escape and a
 * click outside cancel it when it has `onCancel`, and do nothing otherwise. */
export function Modal(props: {
  open: boolean;
  title: string;
  onCancel?: () => void;
  children: ReactNode;
  className?: string;
}) {
  const { onCancel } = props;
  // Radix gives focus back to a Dialog.Trigger, and these dialogs open without one: back to
  // whatever had it when the dialog opened, while that is still on the page.
  // Read while rendering the opening: by the first effect, an autoFocus child already has focus.
  const opener = useRef<HTMLElement | null | undefined>(undefined);
  if (props.open && opener.current === undefined) {
    opener.current = document.activeElement instanceof HTMLElement ? document.activeElement : null;
  }
  return (
    <Dialog.Root open={props.open} onOpenChange={(open) => (!open ? onCancel?.() : undefined)}>
      <Dialog.Portal>
        <Dialog.Overlay className="modal-overlay" />
        <Dialog.Content
          className={`modal ${props.className ?? ""}`}
          aria-describedby={undefined}
          aria-modal="true"
          onCloseAutoFocus={(event) => {
            event.preventDefault();
            if (opener.current?.isConnected) opener.current.focus();
            opener.current = undefined;
          }}
          onEscapeKeyDown={(event) => (onCancel ? undefined : event.preventDefault())}
          onPointerDownOutside={(event) => (onCancel ? undefined : event.preventDefault())}
          onInteractOutside={(event) => (onCancel ? undefined : event.preventDefault())}
        >
          <Dialog.Title className="modal-title">{props.title}</Dialog.Title>
          {props.children}
        </Dialog.Content>
      </Dialog.Portal>
    </Dialog.Root>
  );
}
