import { useId, useState, type FormEvent, type ReactNode } from "react";
import { Field, SubmitStatus, fieldsOf, orderedFields, toJson, useSubmit, type FieldInputProps } from "../common/forms";

function initial(form: string, overrides: Record<string, unknown>): Record<string, unknown> {
  const values: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(fieldsOf(form))) {
    values[name] = spec.default ?? (spec.type === "boolean" ? false : "");
  }
  return { ...values, ...overrides };
}

/** A create form for a POST body schema; the server's 422 messages appear beside their fields. */
export function CreateForm(props: {
  form: string;
  title: string;
  submitLabel: string;
  // What the form says once the server took it ("Queued.", "Created.").
  doneText: string;
  defaults?: Record<string, unknown>;
  order?: string[];
  exclude?: string[];
  custom?: Record<string, (input: FieldInputProps) => ReactNode>;
  labels?: Record<string, string>;
  onCreate: (body: Record<string, unknown>) => Promise<unknown>;
}) {
  const formId = useId().replace(/:/g, "");
  const specs = orderedFields(props.form, props.exclude, props.order);
  const [values, setValues] = useState(() => initial(props.form, props.defaults ?? {}));
  const submit = useSubmit(
    specs.map(([name]) => name),
    Object.fromEntries(specs),
  );

  const onSubmit = async (event: FormEvent) => {
    event.preventDefault();
    const body = Object.fromEntries(specs.map(([name, spec]) => [name, toJson(spec, values[name])]));
    const created = await submit.run(() => props.onCreate(body));
    if (created !== undefined) setValues(initial(props.form, props.defaults ?? {}));
  };

  const unshown = Object.entries(submit.errors)
    .filter(([name]) => !specs.some(([field]) => field === name))
    .map(([name, message]) => (name ? `${name}: ${message}` : message));

  return (
    <form className="settings-form" noValidate onSubmit={(event) => void onSubmit(event)} aria-labelledby={`${formId}-title`} data-form={props.form}>
      <h2 id={`${formId}-title`}>{props.title}</h2>
      <div className="form-grid">
        {specs.map(([name, spec]) => (
          <Field
            key={name}
            formId={formId}
            name={name}
            spec={spec}
            label={props.labels?.[name]}
            error={submit.errors[name]}
            value={values[name]}
            onChange={(next) => setValues((old) => ({ ...old, [name]: next }))}
          >
            {props.custom?.[name]}
          </Field>
        ))}
      </div>
      <div className="form-actions">
        <button type="submit" className="primary" disabled={submit.state.kind === "saving"}>
          {props.submitLabel}
        </button>
        <SubmitStatus state={submit.state} unshown={unshown} done={props.doneText} />
      </div>
    </form>
  );
}
