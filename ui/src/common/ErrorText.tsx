// Errors shown to the user, announced to screen readers (role=alert); nothing when there is none.

export function ErrorText(props: { error: string | null | undefined; small?: boolean }) {
  if (!props.error) return null;
  return (
    <p role="alert" className={props.small ? "error-text small-text" : "error-text"}>
      {props.error}
    </p>
  );
}

/** "Could not load <what>: <reason>" for a failed load. */
export function LoadError(props: { what: string; error: Error | undefined; small?: boolean }) {
  return <ErrorText error={props.error ? `Could not load ${props.what}: ${props.error.message}` : null} small={props.small} />;
}
