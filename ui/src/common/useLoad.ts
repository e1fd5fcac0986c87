// Loading through @tanstack/react-query: answers are cached by key and shared between the
// pages that ask for the same thing; `reload()` fetches again, `setData` puts a known answer in.
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { useCallback } from "react";

export type Loaded<T> = {
  data: T | undefined;
  error: Error | undefined;
  loading: boolean;
  reload: () => Promise<void>;
  setData: (data: T) => void;
};

/** Loads by `key` (an answer is shared by every caller with the same key); `reload()` loads again. */
export function useLoad<T>(key: readonly unknown[], load: () => Promise<T>, options: { fresh?: boolean } = {}): Loaded<T> {
  const client = useQueryClient();
  // `fresh`: never start from a cached answer (a chat opens on the server's current copy).
  const query = useQuery({ queryKey: key, queryFn: load, ...(options.fresh ? { staleTime: 0, gcTime: 0 } : {}) });
  const { refetch } = query;
  const serialized = JSON.stringify(key);
  const reload = useCallback(async () => {
    await refetch();
  }, [refetch]);
  const setData = useCallback(
    (data: T) => client.setQueryData(JSON.parse(serialized) as unknown[], data),
    [client, serialized],
  );
  return {
    data: query.data,
    error: query.error ?? undefined,
    loading: query.isFetching,
    reload,
    setData,
  };
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
