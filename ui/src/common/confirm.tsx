import { useCallback, useRef, useState, type ReactNode } from "react";
import { Modal } from "./Modal";

type Ask = { title: string; message: ReactNode; confirmLabel: string; danger: boolean };

/** `const [dialog, confirm] = useConfirm()`; render `dialog`, then `if (await confirm({...}))`. */
export function useConfirm(): [ReactNode, (ask: Partial<Ask> & { message: ReactNode }) => Promise<boolean>] {
  const [ask, setAsk] = useState<Ask | null>(null);
  const resolver = useRef<((answer: boolean) => void) | null>(null);
  const confirm = useCallback((next: Partial<Ask> & { message: ReactNode }) => {
    setAsk({ title: "Are you sure?", confirmLabel: "OK", danger: false, ...next });
    return new Promise<boolean>((resolve) => {
      resolver.current = resolve;
    });
  }, []);
  const answer = (value: boolean) => {
    resolver.current?.(value);
    resolver.current = null;
    setAsk(null);
  };
  const dialog = (
    <Modal open={ask !== null} title={ask?.title ?? ""} onCancel={() => answer(false)}>
      <div className="modal-body">{ask?.message}</div>
      <div className="modal-actions">
        <button type="button" onClick={() => answer(false)} autoFocus>
          Cancel
        </button>
        <button type="button" className={ask?.danger ? "danger" : "primary"} onClick={() => answer(true)}>
          {ask?.confirmLabel}
        </button>
      </div>
    </Modal>
  );
  return [dialog, confirm];
}
