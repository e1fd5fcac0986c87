import { Suspense, lazy, useCallback, useEffect, useId, useState, type FormEvent } from "react";
import { api } from "../api/client";
import type { ModelsOut, ScheduleCreate, ScheduleOut, SchedulePatch, TaskCreate, TaskOut, WorkspaceOut } from "../api/types";
import { useConfirm } from "../common/confirm";
import { Field, PatchForm, SelectInput, fieldsOf, useSubmit, SubmitStatus, type FieldInputProps } from "../common/forms";
import { ListSection, useActions } from "../common/lists";
import { stamp } from "../common/stamp";
import { useLoad } from "../common/useLoad";
import { modelSelect } from "../settings/SettingsPage";
import { CreateForm } from "./CreateForm";
import { TaskApproval } from "./TaskApproval";

// A task's result reads like a chat answer: rendered Markdown (the chat's lazy renderer).
const Markdown = lazy(() => import("../chat/Markdown"));

const ACTIVE = new Set(["queued", "running", "cancelling"]);
const RESOLVABLE = new Set(["failed", "cancelled", "dead-letter"]);
const TERMINAL = new Set(["completed", "failed", "cancelled", "dead-letter"]);
const TONE: Record<string, string> = {
  queued: "pending",
  running: "pending",
  cancelling: "warn",
  completed: "ok",
  failed: "bad",
  cancelled: "warn",
  "dead-letter": "bad",
};
const POLL_MS = 5000;
const LABELS = { workspaceId: "Workspace", cron: "Cron (5 fields, server timezone)" };

function workspaceSelect(workspaces: WorkspaceOut[]) {
  return function WorkspaceSelect(input: FieldInputProps) {
    return <SelectInput input={input} value={String(input.value ?? "")} options={workspaces.map((workspace) => [workspace.id, workspace.name])} />;
  };
}

/** A list's create form in a collapsed card, once the workspaces are known; what it creates reloads the list. */
function CreateCard(props: {
  summary: string;
  form: { form: string; title: string; submitLabel: string; doneText: string; order: string[] };
  workspaces: WorkspaceOut[];
  models: ModelsOut | undefined;
  create: (body: Record<string, unknown>) => Promise<unknown>;
  reload: () => Promise<void>;
}) {
  const defaultWorkspace = props.workspaces.find((workspace) => workspace.isDefault)?.id ?? props.workspaces[0]?.id ?? "";
  return (
    <details className="card">
      <summary>{props.summary}</summary>
      {props.workspaces.length ? (
        <CreateForm
          key={defaultWorkspace}
          {...props.form}
          defaults={{ workspaceId: defaultWorkspace }}
          // A task's channel (where its result is posted) is an API field: docs/channels.md.
          exclude={["sessionId", "channel"]}
          custom={{ workspaceId: workspaceSelect(props.workspaces), model: modelSelect(props.models, "the default model") }}
          labels={LABELS}
          onCreate={async (body) => {
            const created = await props.create(body);
            await props.reload();
            return created;
          }}
        />
      ) : (
        <p className="muted">Loading workspaces…</p>
      )}
    </details>
  );
}

export function TasksPage(props: { models: ModelsOut | undefined; workspaces: WorkspaceOut[] }) {
  const tasks = useLoad(["tasks"], () => api.tasks());
  const schedules = useLoad(["schedules"], () => api.schedules());
  const [dialog, confirm] = useConfirm();
  const { act, banner } = useActions(() => Promise.all([tasks.reload(), schedules.reload()]));
  const reloadTasks = useCallback(() => void tasks.reload(), [tasks.reload]);

  useEffect(() => {
    const timer = window.setInterval(() => {
      if (document.visibilityState === "visible") {
        void tasks.reload();
        void schedules.reload();
      }
    }, POLL_MS);
    return () => window.clearInterval(timer);
  }, [tasks.reload, schedules.reload]);

  return (
    <div className="page tasks-page">
      <h1>Tasks and schedules</h1>
      {banner}
      <ListSection
        id="tasks"
        title="Background tasks"
        noun="tasks"
        list={tasks}
        items={tasks.data?.tasks}
        empty="No background tasks yet."
        testId="task-list"
        renderItem={(task) => (
          <TaskItem
            key={task.id}
            task={task}
            onCancel={() => void act("cancel the task", () => api.cancelTask(task.id))}
            onResolved={() => void tasks.reload()}
            onAnswered={reloadTasks}
            onDelete={async () => {
              if (
                await confirm({
                  title: "Delete this task record?",
                  message: <p>The record is removed. This never cancels work or rolls anything back.</p>,
                  confirmLabel: "Delete",
                  danger: true,
                })
              ) {
                await act("delete the task", () => api.deleteTask(task.id));
              }
            }}
          />
        )}
      >
        <CreateCard
          summary="New task"
          form={{ form: "TaskCreate", title: "Queue a background task", submitLabel: "Queue task", doneText: "Queued: it runs when a worker is free.", order: ["prompt", "workspaceId", "model", "maxAttempts"] }}
          workspaces={props.workspaces}
          models={props.models}
          create={(body) => api.createTask(body as TaskCreate)}
          reload={tasks.reload}
        />
      </ListSection>

      <ListSection
        id="schedules"
        title="Schedules"
        noun="schedules"
        list={schedules}
        items={schedules.data?.schedules}
        empty="No schedules yet."
        testId="schedule-list"
        renderItem={(schedule) => (
          <ScheduleItem
            key={`${schedule.id}-${schedule.updatedAt}`}
            schedule={schedule}
            models={props.models}
            onSaved={() => void schedules.reload()}
            onToggle={() => void act("change the schedule", () => api.patchSchedule(schedule.id, { enabled: !schedule.enabled }))}
            onDelete={async () => {
              if (
                await confirm({
                  title: "Delete this schedule?",
                  message: <p>“{schedule.name}” stops creating tasks. Tasks it already created stay.</p>,
                  confirmLabel: "Delete",
                  danger: true,
                })
              ) {
                await act("delete the schedule", () => api.deleteSchedule(schedule.id));
              }
            }}
          />
        )}
      >
        <CreateCard
          summary="New schedule"
          form={{
            form: "ScheduleCreate",
            title: "Create a schedule",
            submitLabel: "Create schedule",
            doneText: "Created.",
            order: ["name", "cron", "prompt", "workspaceId", "model", "enabled", "maxAttempts"],
          }}
          workspaces={props.workspaces}
          models={props.models}
          create={(body) => api.createSchedule(body as ScheduleCreate)}
          reload={schedules.reload}
        />
      </ListSection>
      {dialog}
    </div>
  );
}

// A long result shows its first lines until asked: a once-a-minute schedule's answers would
// otherwise fill the page. A little more than that is shown whole (the button would hide little).
const PREVIEW_LINES = 6;
const PREVIEW_CHARS = 400;

/** The start of a long result (up to PREVIEW_LINES lines, PREVIEW_CHARS characters); `null` for a short one. */
export function previewOf(text: string): string | null {
  const whole = text.trimEnd();
  const lines = whole.split("\n");
  if (lines.length <= PREVIEW_LINES + 2 && whole.length <= PREVIEW_CHARS * 1.5) return null;
  let preview = lines.slice(0, PREVIEW_LINES).join("\n");
  if (preview.length > PREVIEW_CHARS) {
    const space = preview.lastIndexOf(" ", PREVIEW_CHARS);
    preview = `${preview.slice(0, space > PREVIEW_CHARS / 2 ? space : PREVIEW_CHARS).trimEnd()} …`;
  }
  return preview;
}

function TaskResult(props: { text: string }) {
  const id = useId();
  const [expanded, setExpanded] = useState(false);
  const preview = previewOf(props.text);
  const shown = preview !== null && !expanded ? preview : props.text;
  return (
    <div className="task-result" data-testid="task-result">
      <span className="tool-label">Result</span>
      <div id={id} data-testid="task-result-text" data-collapsed={shown !== props.text}>
        <Suspense fallback={<p className="pre-line">{shown}</p>}>
          {/* A cut preview may end inside a code block or emphasis: closed as a streamed answer is. */}
          <Markdown text={shown} streaming={shown !== props.text} />
        </Suspense>
      </div>
      {preview !== null ? (
        <button type="button" className="small ghost" aria-expanded={expanded} aria-controls={id} onClick={() => setExpanded((open) => !open)}>
          {expanded ? "Show less" : "Show all"}
        </button>
      ) : null}
    </div>
  );
}

function TaskItem(props: {
  task: TaskOut;
  onCancel: () => void;
  onResolved: () => void;
  onAnswered: () => void;
  onDelete: () => void;
}) {
  const { task } = props;
  const [resolving, setResolving] = useState(false);
  const waiting = ACTIVE.has(task.status) ? task.waitingForApproval : null;
  return (
    <li
      className="card task"
      data-testid="task-item"
      data-task-id={task.id}
      data-status={task.status}
      data-waiting-for-approval={waiting ? waiting.approvalId : undefined}
    >
      <div className="task-head">
        <span className={`badge ${TONE[task.status] ?? "pending"}`}>{task.status}</span>
        <span className="task-prompt">{task.prompt.length > 160 ? `${task.prompt.slice(0, 159)}…` : task.prompt}</span>
      </div>
      {task.prompt.length > 160 ? (
        <details className="task-full-prompt">
          <summary>Whole prompt</summary>
          <p className="pre-line">{task.prompt}</p>
        </details>
      ) : null}
      <div className="task-meta muted">
        <span>{task.workspaceId}</span>
        <span>{task.model || "default model"}</span>
        <span>
          attempt {task.attemptCount}/{task.maxAttempts}
        </span>
        <span>{task.source}</span>
        {task.scheduleId ? <span>from a schedule</span> : null}
        <span title="The thread this task's turns run in">thread {task.threadId}</span>
        <span>created {stamp(task.createdAt)}</span>
        {task.nextAttemptAt ? <span>next attempt {stamp(task.nextAttemptAt)}</span> : null}
      </div>
      {waiting ? <TaskApproval task={task} onAnswered={props.onAnswered} /> : null}
      {task.lastError ? (
        <p className="error-text small-text">
          {task.lastErrorClass ? `${task.lastErrorClass}: ` : ""}
          {task.lastError}
        </p>
      ) : null}
      {task.outcome ? <TaskResult text={task.outcome} /> : null}
      {task.resolution ? <p className="small-text">Resolved: {task.resolution}</p> : null}
      {task.progress.length ? (
        <p className="small-text task-latest" data-testid="task-latest-progress">
          <span className="muted">Latest:</span> {task.progress[task.progress.length - 1]?.message}
        </p>
      ) : null}
      {task.progress.length > 1 ? (
        <details>
          <summary>All progress ({task.progress.length} steps)</summary>
          <ol className="progress">
            {task.progress.map((step, index) => (
              <li key={index}>
                <span className="muted">#{step.attempt} {step.kind}</span> {step.message}
              </li>
            ))}
          </ol>
        </details>
      ) : null}
      <div className="task-actions">
        {ACTIVE.has(task.status) && task.status !== "cancelling" ? (
          <button type="button" className="small" onClick={props.onCancel}>
            Cancel
          </button>
        ) : null}
        {RESOLVABLE.has(task.status) ? (
          <button type="button" className="small" aria-expanded={resolving} onClick={() => setResolving((open) => !open)}>
            Resolve…
          </button>
        ) : null}
        {TERMINAL.has(task.status) ? (
          <button type="button" className="small danger" onClick={props.onDelete}>
            Delete
          </button>
        ) : null}
      </div>
      {resolving ? (
        <ResolveForm
          taskId={task.id}
          onDone={() => {
            setResolving(false);
            props.onResolved();
          }}
        />
      ) : null}
    </li>
  );
}

function ResolveForm(props: { taskId: string; onDone: () => void }) {
  const formId = useId().replace(/:/g, "");
  const [evidence, setEvidence] = useState("");
  const submit = useSubmit(["evidence"]);
  const spec = fieldsOf("TaskResolve").evidence ?? { type: "string" };
  const onSubmit = async (event: FormEvent) => {
    event.preventDefault();
    const done = await submit.run(() => api.resolveTask(props.taskId, { evidence }));
    if (done !== undefined) props.onDone();
  };
  return (
    <form className="resolve-form" noValidate onSubmit={(event) => void onSubmit(event)}>
      <Field
        formId={formId}
        name="evidence"
        spec={{ ...spec, maxLength: Math.max(spec.maxLength ?? 0, 2000) }}
        label="Evidence (what fixed it)"
        error={submit.errors.evidence}
        value={evidence}
        onChange={(value) => setEvidence(String(value))}
      />
      <div className="form-actions">
        <button type="submit" className="primary small">
          Mark completed
        </button>
        <SubmitStatus state={submit.state} />
      </div>
    </form>
  );
}

function ScheduleItem(props: {
  schedule: ScheduleOut;
  models: ModelsOut | undefined;
  onSaved: () => void;
  onToggle: () => void;
  onDelete: () => void;
}) {
  const { schedule } = props;
  const [editing, setEditing] = useState(false);
  const user = schedule.source === "user";
  return (
    <li className="card task" data-testid="schedule-item" data-schedule-id={schedule.id}>
      <div className="task-head">
        <span className={`badge ${schedule.enabled ? "ok" : "warn"}`} data-testid="schedule-state">{schedule.enabled ? "active" : "paused"}</span>
        <strong>{schedule.name}</strong>
        <code>{schedule.cron}</code>
        <span className="muted">({schedule.timezone})</span>
      </div>
      <div className="task-meta muted">
        <span>{schedule.workspaceId}</span>
        <span>{schedule.model || "default model"}</span>
        <span>{schedule.source}</span>
        <span>last run {stamp(schedule.lastTick)}</span>
      </div>
      {!schedule.enabled ? (
        <p className="muted small-text" data-testid="schedule-paused">
          Paused: it runs again once enabled.
        </p>
      ) : (
      <div className="next-runs" data-testid="next-runs">
        <span className="muted">Next runs (server time):</span>
        {schedule.nextRuns.length ? (
          <ol>
            {schedule.nextRuns.slice(0, 5).map((run) => (
              <li key={run}>
                <time dateTime={run}>{stamp(run)}</time>
              </li>
            ))}
          </ol>
        ) : (
          <span className="muted"> none</span>
        )}
      </div>
      )}
      {user ? (
        <div className="task-actions">
          <button type="button" className="small" onClick={props.onToggle}>
            {schedule.enabled ? "Pause" : "Resume"}
          </button>
          <button type="button" className="small" aria-expanded={editing} onClick={() => setEditing((open) => !open)}>
            Edit…
          </button>
          <button type="button" className="small danger" onClick={props.onDelete}>
            Delete
          </button>
        </div>
      ) : (
        <p className="muted small-text">A system schedule: managed by the autonomy settings.</p>
      )}
      {editing ? (
        <PatchForm
          form="SchedulePatch"
          title={`Edit ${schedule.name}`}
          value={schedule}
          exclude={["sessionId"]}
          order={["name", "cron", "prompt", "model", "enabled", "maxAttempts"]}
          labels={LABELS}
          custom={{ model: modelSelect(props.models, "the default model") }}
          onSave={(patch) => api.patchSchedule(schedule.id, patch as SchedulePatch)}
          onSaved={props.onSaved}
        />
      ) : null}
    </li>
  );
}
