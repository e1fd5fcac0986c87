// Forms built from the gateway's own body schemas (fields.gen.json, generated from the
// OpenAPI document): labels, input kinds, bounds and descriptions come from the contract.
// Browser validation is off (`noValidate`): the server's 422 answer is what the user sees,
// beside the field it names.
import { useId, useState, type FormEvent, type ReactNode } from "react";
import fieldsJson from "../api/fields.gen.json";
import { ApiError } from "../api/client";
import { messageOf } from "./useLoad";
import { useUnsaved } from "./unsaved";

export type FieldSpec = {
  type: string;
  enum?: string[];
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  description?: string;
  nullable?: boolean;
  default?: unknown;
};

export const FORM_FIELDS = fieldsJson as Record<string, Record<string, FieldSpec> | undefined>;

export function fieldsOf(form: string): Record<string, FieldSpec> {
  return FORM_FIELDS[form] ?? {};
}

export function humanize(name: string): string {
  const words = name.replace(/([a-z0-9])([A-Z])/g, "$1 $2").replace(/Ms$/, " (ms)").toLowerCase();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

export function hintOf(spec: FieldSpec, lengths = true): string {
  const parts: string[] = [];
  // The OpenAPI description is the help line; the bounds follow it.
  if (spec.description) parts.push(sentence(spec.description));
  if (spec.minimum !== undefined && spec.maximum !== undefined) parts.push(`${spec.minimum} – ${spec.maximum}`);
  else if (spec.minimum !== undefined) parts.push(`at least ${spec.minimum}`);
  else if (spec.maximum !== undefined) parts.push(`at most ${spec.maximum}`);
  if (lengths && spec.maxLength !== undefined && spec.type === "string" && !spec.enum) parts.push(`up to ${spec.maxLength} characters`);
  return parts.join(" · ");
}

/** Internal field names in a description ("greater than taskHeartbeatIntervalMs") as labels. */
function humanizeNames(text: string): string {
  return text.replace(/\b[a-z]+(?:[A-Z][a-z0-9]*)+\b/g, (name) => humanize(name).toLowerCase());
}

function sentence(text: string): string {
  const trimmed = humanizeNames(text.trim());
  return trimmed.charAt(0).toUpperCase() + trimmed.slice(1);
}

/**
 * A validation message in words: pydantic's wording ("Input should be greater than or equal
 * to 2", "String should match pattern '^[a-z]+$'") becomes what a person reads; patterns and
 * internal names are never shown.
 */
export function plainMessage(message: string, spec?: FieldSpec): string {
  const text = message.replace(/^Value error,\s*/i, "").trim();
  let match: RegExpExecArray | null;
  if ((match = /greater than or equal to (-?[\d.]+)/i.exec(text))) return `Must be at least ${match[1]}.`;
  if ((match = /greater than (-?[\d.]+)/i.exec(text))) return `Must be more than ${match[1]}.`;
  if ((match = /less than or equal to (-?[\d.]+)/i.exec(text))) return `Must be at most ${match[1]}.`;
  if ((match = /less than (-?[\d.]+)/i.exec(text))) return `Must be less than ${match[1]}.`;
  if ((match = /at most (\d+) characters?/i.exec(text))) return `Too long: at most ${match[1]} characters.`;
  if ((match = /at least (\d+) characters?/i.exec(text))) return Number(match[1]) === 1 ? "Cannot be empty." : `Too short: at least ${match[1]} characters.`;
  if (/valid integer/i.test(text)) return "Enter a whole number.";
  if (/valid number/i.test(text)) return "Enter a number.";
  if (/valid boolean/i.test(text)) return "Choose yes or no.";
  if (/should match pattern/i.test(text)) {
    return spec?.description ? `Not in the expected form (${spec.description}).` : "Not in the expected form: it has characters that are not allowed here.";
  }
  if (/^field required$/i.test(text) || /missing/i.test(text)) return "Required.";
  if ((match = /^Input should be (.+)$/i.exec(text))) return `Choose ${(match[1] ?? "").replace(/'/g, "")}.`;
  if (/extra inputs are not permitted/i.test(text)) return "This field cannot be changed here.";
  return sentence(text);
}

/** What an input holds, turned into the JSON the API expects; a value that is not a number is sent as typed, for the server to refuse. */
export function toJson(spec: FieldSpec, raw: unknown): unknown {
  if (spec.nullable && raw === "") return null;
  if ((spec.type === "integer" || spec.type === "number") && typeof raw === "string") {
    const trimmed = raw.trim();
    return trimmed !== "" && Number.isFinite(Number(trimmed)) ? Number(trimmed) : raw;
  }
  return raw;
}

export type FieldInputProps = {
  id: string;
  name: string;
  spec: FieldSpec;
  value: unknown;
  onChange: (value: unknown) => void;
  describedBy: string;
  invalid: boolean;
};

/** A field's input as a select; `options` are [value, text] pairs. */
export function SelectInput(props: { input: FieldInputProps; value: string; options: [string, string][] }) {
  const { input } = props;
  return (
    <select
      id={input.id}
      name={input.name}
      aria-describedby={input.describedBy || undefined}
      aria-invalid={input.invalid || undefined}
      value={props.value}
      onChange={(event) => input.onChange(event.target.value)}
    >
      {props.options.map(([value, text]) => (
        <option key={value} value={value}>
          {text}
        </option>
      ))}
    </select>
  );
}

export function FieldInput(props: FieldInputProps) {
  const { spec } = props;
  const common = {
    id: props.id,
    name: props.name,
    "aria-describedby": props.describedBy,
    "aria-invalid": props.invalid || undefined,
  };
  if (spec.type === "boolean") {
    return <input type="checkbox" {...common} checked={props.value === true} onChange={(event) => props.onChange(event.target.checked)} />;
  }
  if (spec.enum) {
    return <SelectInput input={props} value={String(props.value ?? "")} options={spec.enum.map((option) => [option, option])} />;
  }
  if (spec.type === "integer" || spec.type === "number") {
    return (
      <input
        type="number"
        inputMode={spec.type === "integer" ? "numeric" : "decimal"}
        step={spec.type === "integer" ? 1 : "any"}
        {...common}
        value={String(props.value ?? "")}
        onChange={(event) => props.onChange(event.target.value)}
      />
    );
  }
  if ((spec.maxLength ?? 0) >= 2000) {
    return <textarea rows={4} {...common} value={String(props.value ?? "")} onChange={(event) => props.onChange(event.target.value)} />;
  }
  return <input type="text" {...common} value={String(props.value ?? "")} onChange={(event) => props.onChange(event.target.value)} />;
}

/** A labelled field with its hint and the server's message for it. */
export function Field(props: {
  formId: string;
  name: string;
  spec: FieldSpec;
  label?: string;
  error?: string | undefined;
  children?: (input: FieldInputProps) => ReactNode;
  value: unknown;
  onChange: (value: unknown) => void;
}) {
  const id = `${props.formId}-${props.name}`;
  // A custom input (a select of known values) makes the length bound noise.
  const hint = hintOf(props.spec, !props.children);
  const describedBy = [hint ? `${id}-hint` : "", props.error ? `${id}-error` : ""].filter(Boolean).join(" ");
  const input: FieldInputProps = {
    id,
    name: props.name,
    spec: props.spec,
    value: props.value,
    onChange: props.onChange,
    describedBy,
    invalid: !!props.error,
  };
  const checkbox = props.spec.type === "boolean" && !props.children;
  return (
    <div className={`field${checkbox ? " checkbox" : ""}${props.error ? " has-error" : ""}`} data-field={props.name}>
      <label htmlFor={id} className="field-label">
        {props.label ?? humanize(props.name)}
      </label>
      {props.children ? props.children(input) : <FieldInput {...input} />}
      {hint ? (
        <span id={`${id}-hint`} className="field-hint">
          {hint}
        </span>
      ) : null}
      {props.error ? (
        <span id={`${id}-error`} className="field-error" role="alert" data-testid="field-error">
          {props.error}
        </span>
      ) : null}
    </div>
  );
}

/** The writable fields of a body schema, those named in `order` first, in that order. */
export function orderedFields(form: string, exclude?: string[], order?: string[], extra?: Record<string, FieldSpec>): [string, FieldSpec][] {
  const specs = Object.entries({ ...extra, ...fieldsOf(form) }).filter(([name]) => !exclude?.includes(name));
  if (order) {
    const rank = (name: string) => {
      const index = order.indexOf(name);
      return index === -1 ? order.length : index;
    };
    specs.sort(([a], [b]) => rank(a) - rank(b));
  }
  return specs;
}

export type SubmitState = { kind: "idle" } | { kind: "saving" } | { kind: "saved"; what?: string } | { kind: "failed"; reason: string };

/**
 * A refusal without per-field details (a 400 from the owning service) whose reason starts
 * with a field's name ("cron '...' is not a valid ...") belongs beside that field.
 */
export function fieldOfReason(reason: string, names: string[]): string | null {
  const first = /^[A-Za-z_][A-Za-z0-9_]*/.exec(reason.trim())?.[0]?.toLowerCase();
  if (!first) return null;
  return names.find((name) => name.toLowerCase() === first || name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`) === first) ?? null;
}

/** Runs a save, keeping the server's per-field messages (in plain words, with the field's
 * description where one explains the expected form) and its reason. */
export function useSubmit(names: string[] = [], specs: Record<string, FieldSpec> = {}) {
  const [state, setState] = useState<SubmitState>({ kind: "idle" });
  const [errors, setErrors] = useState<Record<string, string>>({});
  const run = async <T,>(save: () => Promise<T>): Promise<T | undefined> => {
    setState({ kind: "saving" });
    setErrors({});
    try {
      const result = await save();
      setState({ kind: "saved" });
      return result;
    } catch (error) {
      if (error instanceof ApiError) {
        const field = Object.keys(error.fields).length ? null : fieldOfReason(error.message, names);
        setErrors(
          field
            ? { [field]: plainMessage(error.message, specs[field]) }
            : Object.fromEntries(Object.entries(error.fields).map(([name, text]) => [name, plainMessage(text, specs[name])])),
        );
        setState({ kind: "failed", reason: error.message });
      } else {
        setState({ kind: "failed", reason: messageOf(error) });
      }
      return undefined;
    }
  };
  return { state, errors, run, setState, setErrors };
}

/** `done`: what a finished submit says when it is not a save ("Queued.", "Created."). */
export function SubmitStatus({ state, unshown, done = "Saved." }: { state: SubmitState; unshown?: string[]; done?: string }) {
  return (
    <span className="submit-status" aria-live="polite" data-testid="submit-status" data-state={state.kind}>
      {state.kind === "saving" ? "Saving…" : null}
      {state.kind === "saved" ? (state.what ? `Saved: ${state.what}.` : done) : null}
      {state.kind === "failed" ? (
        <span className="error-text">
          Not saved: {unshown?.length ? unshown.join("; ") : state.reason}
        </span>
      ) : null}
    </span>
  );
}

export type PatchFormProps<Out extends object> = {
  form: string;
  title: string;
  description?: string;
  value: Out;
  onSave: (patch: Record<string, unknown>) => Promise<Out>;
  onSaved?: (value: Out) => void;
  custom?: Record<string, (input: FieldInputProps) => ReactNode>;
  labels?: Record<string, string>;
  exclude?: string[];
  order?: string[];
  /** Fields under headings, in this order; fields in no group follow under "Other". */
  groups?: { title: string; fields: string[] }[];
  /** Fields to offer when the generated schema does not have them (yet); the schema's own spec wins. */
  extraFields?: Record<string, FieldSpec>;
};

/** A settings object's form: shows every writable field of `form` (a PATCH schema) and sends only the changed ones. */
export function PatchForm<Out extends object>(props: PatchFormProps<Out>) {
  const formId = useId().replace(/:/g, "");
  // The enable switch first, then the order given (or the groups'), then the rest.
  const enableFirst = (names: string[]) => [...names.filter((name) => /^enabled$/.test(name)), ...names.filter((name) => !/^enabled$/.test(name))];
  const order = enableFirst(props.order ?? props.groups?.flatMap((group) => group.fields) ?? Object.keys(fieldsOf(props.form)));
  const listed = orderedFields(props.form, props.exclude, order);
  const missing = Object.entries(props.extraFields ?? {}).filter(([name]) => !listed.some(([field]) => field === name) && !props.exclude?.includes(name));
  const specs = missing.length ? orderedFields(props.form, props.exclude, order, Object.fromEntries(missing)) : listed;
  const [value, setValue] = useState(props.value);
  const [draft, setDraft] = useState<Record<string, unknown>>({});
  const submit = useSubmit(
    specs.map(([name]) => name),
    Object.fromEntries(specs),
  );
  const current = value as Record<string, unknown>;
  const shown = (name: string) => (name in draft ? draft[name] : current[name]);
  const changed = specs.filter(
    ([name, spec]) => name in draft && JSON.stringify(toJson(spec, draft[name])) !== JSON.stringify(current[name]),
  );

  useUnsaved(changed.length > 0, props.title);
  const labelOf = (name: string) => props.labels?.[name] ?? humanize(name);
  const onSubmit = async (event: FormEvent) => {
    event.preventDefault();
    if (!changed.length) {
      // Every field is back to its stored value: nothing to send, nothing wrong.
      setDraft({});
      submit.setErrors({});
      submit.setState({ kind: "idle" });
      return;
    }
    const patch = Object.fromEntries(changed.map(([name, spec]) => [name, toJson(spec, draft[name])]));
    const saved = await submit.run(() => props.onSave(patch));
    if (saved !== undefined) {
      submit.setState({ kind: "saved", what: changed.map(([name]) => labelOf(name)).join(", ") });
      setValue(saved);
      setDraft({});
      props.onSaved?.(saved);
    }
  };

  const renderField = (name: string, spec: FieldSpec) => (
    <Field
      key={name}
      formId={formId}
      name={name}
      spec={spec}
      label={labelOf(name)}
      error={submit.errors[name]}
      value={shown(name)}
      onChange={(next) => setDraft((old) => ({ ...old, [name]: next }))}
    >
      {props.custom?.[name]}
    </Field>
  );
  const grouped = new Set(props.groups?.flatMap((group) => group.fields) ?? []);
  const sections = props.groups
    ? [
        ...props.groups.map((group) => ({ title: group.title, specs: specs.filter(([name]) => group.fields.includes(name)) })),
        { title: "Other", specs: specs.filter(([name]) => !grouped.has(name)) },
      ].filter((section) => section.specs.length)
    : [{ title: props.title, specs }];
  const failedFields = submit.state.kind === "failed" ? specs.filter(([name]) => submit.errors[name]).map(([name]) => labelOf(name)) : [];
  const unshown = Object.entries(submit.errors)
    .filter(([name]) => !specs.some(([field]) => field === name))
    .map(([name, message]) => (name ? `${humanize(name)}: ${message}` : message));

  return (
    <form className="settings-form" noValidate onSubmit={(event) => void onSubmit(event)} aria-labelledby={`${formId}-title`} data-form={props.form}>
      <div className="form-head">
        <h2 id={`${formId}-title`}>{props.title}</h2>
        {props.description ? <p className="muted">{props.description}</p> : null}
      </div>
      {sections.map((section) => (
        <fieldset key={section.title} className="form-group">
          {sections.length > 1 ? <legend>{section.title}</legend> : null}
          <div className="form-grid">{section.specs.map(([name, spec]) => renderField(name, spec))}</div>
        </fieldset>
      ))}
      <div className="form-actions">
        <button type="submit" className="primary" disabled={submit.state.kind === "saving" || !changed.length} title={changed.length ? undefined : "Nothing changed yet"}>
          Save
        </button>
        <button type="button" className="ghost" disabled={!Object.keys(draft).length} onClick={() => { setDraft({}); submit.setState({ kind: "idle" }); submit.setErrors({}); }}>
          Discard changes
        </button>
        <SubmitStatus state={failedFields.length && !unshown.length ? { kind: "failed", reason: `check ${failedFields.join(", ")} (marked above)` } : submit.state} unshown={unshown} />
      </div>
    </form>
  );
}
