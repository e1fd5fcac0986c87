import * as Dialog from "@radix-ui/react-dialog";
import type { ReactNode } from "react";

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
  return (
    <Dialog.Root open={props.open} onOpenChange={(open) => (!open ? onCancel?.() : undefined)}>
      <Dialog.Portal>
        <Dialog.Overlay className="modal-overlay" />
        <Dialog.Content
          className={`modal ${props.className ?? ""}`}
          aria-describedby={undefined}
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
