import { useCallback, useEffect, useRef, useState } from "react";

export type Loaded<T> = {
  data: T | undefined;
  error: Error | undefined;
  loading: boolean;
  reload: () => Promise<void>;
  setData: (data: T) => void;
};

/** Loads once on mount (and when `deps` change); `reload()` loads again. Stale answers are dropped. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<Error | undefined>(undefined);
  const [loading, setLoading] = useState(true);
  const generation = useRef(0);
  const loader = useRef(load);
  loader.current = load;

  const reload = useCallback(async () => {
    const mine = ++generation.current;
    setLoading(true);
    try {
      const value = await loader.current();
      if (mine === generation.current) {
        setData(value);
        setError(undefined);
      }
    } catch (caught) {
      if (mine === generation.current) setError(caught instanceof Error ? caught : new Error(String(caught)));
    } finally {
      if (mine === generation.current) setLoading(false);
    }
  }, []);

  useEffect(() => {
    void reload();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);

  return { data, error, loading, reload, setData };
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
