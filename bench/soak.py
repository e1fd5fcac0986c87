"""Soak: the whole stack at 60 % of its run capacity with 1 % injected task failures and a canary
secret present (RELIABILITY row 13, with row 23's canary).

    .venv/bin/python -P bench/soak.py [--minutes 30 | --hours 4] [--capacity 10] [--load 0.6]
        [--failure-every 100] [--sample-s 15] [--runner-workers N]

The stack is `make run`'s: the launcher (`popagent_dev.launcher`, as tests/e2e starts it) with every
service, embedded PostgreSQL and NATS, and the scripted model server (bench/helpers/soak_model.py)
as its own process, answering each turn with a paced stream (50 chunks, 20 ms apart: ~1 s).
Capacity is the runs one tasks worker takes at once (agent-runtime `concurrency`, 10 by default);
the load keeps `capacity x load` runs in flight all the time (60 %: one chat, streamed and read to
its end through the gateway, and five background tasks, each created through `POST /api/tasks`
and followed to its terminal state). One task in `--failure-every` (1 %) starts with the marker the
model server answers with HTTP 400: its one attempt fails. A secret whose value is the canary
(tests/support/canary.py: raw, base64, hex, URL-encoded forms) is stored and bound to an origin
before the load starts.

Printed at the end:
- RSS of every service process, first and last sample and the slope from a least-squares line
  over the samples after the warm-up (the first 10 %, at least 60 s), in % of its mean per hour
  (target < 1 %/h; a run of minutes mostly measures caches and pools filling: read it from a
  run of 30 minutes or more); restarts by the launcher's supervisor (target 0);
- tasks stuck `running` with a heartbeat older than heartbeat timeout + sweep interval (20 + 5 s),
  checked in the database every sample (target 0), and tasks left queued or running at the end;
- terminal failures against the injected failures (target: equal exactly). A user task's
  execution error is terminal (`failed`: its side effects are unknown, so it is not retried;
  docs/architecture.md, A task attempt) and creates one remediation task; `dead-letter` is the
  state of retried work whose attempts ran out. Both are counted; together they must equal the
  injected failures, and the uninjected tasks must all complete;
- the canary: occurrences in every response the bench read (chat streams, task reads, the
  secrets list, the observability API's logs and traces), every service log, the NATS JetStream
  store (every event published) and PostgreSQL's data folder (target 0 everywhere);
- task turn time (created -> terminal) p50/p95 in the last tenth of the run against the first
  tenth after the warm-up (the ratio: a slowdown over time).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx
import psutil
import uvloop

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the benchmarks' shared `bench.helpers` (`python -P` leaves bench/ off the path)
sys.path.append(str(REPO / "tests"))  # last, so no test folder shadows a module: tests/support

from bench.helpers.launched_stack import children, keep_draining, model_server, tasks_database  # noqa: E402
from support.canary import CANARY, find_canary  # noqa: E402
from support.launcher import Launched, launch  # noqa: E402

FAILURE_MARKER = "INJECT-FAILURE"
TERMINAL = {"completed", "failed", "cancelled", "dead-letter"}
# The tasks service's defaults (POPAGENT_TASKS_HEARTBEAT_TIMEOUT_S, _SWEEP_INTERVAL_S).
HEARTBEAT_TIMEOUT_S, SWEEP_INTERVAL_S = 20.0, 5.0
CANARY_RESOURCE, CANARY_NAME, CANARY_ORIGIN = "popagent-user", "soak-canary", "https://soak.example"


@dataclass
class Findings:
    started: float = field(default_factory=time.monotonic)
    # (seconds since start, seconds from created to terminal) of each task the load created.
    task_times: list[tuple[float, float]] = field(default_factory=list)
    task_outcomes: dict[str, str] = field(default_factory=dict)
    injected: set[str] = field(default_factory=set)
    chat_turns: int = 0
    chat_turns_without_finish: int = 0
    errors: list[str] = field(default_factory=list)
    # where -> form, for every place the canary was found.
    leaks: dict[str, str] = field(default_factory=dict)
    responses_scanned: int = 0
    response_bytes: int = 0
    stuck: set[str] = field(default_factory=set)
    # name -> [(seconds since start, RSS MiB, pid)]
    rss: dict[str, list[tuple[float, float, int]]] = field(default_factory=dict)

    def scan(self, where: str, data: bytes) -> None:
        self.responses_scanned += 1
        self.response_bytes += len(data)
        form = find_canary(data)
        if form is not None:
            self.leaks.setdefault(where, form)


async def one_task(client: httpx.AsyncClient, findings: Findings, number: int, failure_every: int) -> None:
    inject = number % failure_every == failure_every // 2
    prompt = f"{FAILURE_MARKER} soak task {number}" if inject else f"soak task {number}: report the time"
    started = time.monotonic()
    created = await client.post("/api/tasks", json={"prompt": prompt, "workspaceId": "popagent", "maxAttempts": 1})
    findings.scan("POST /api/tasks", created.content)
    if created.status_code != 201:
        findings.errors.append(f"POST /api/tasks -> {created.status_code}: {created.text[:200]}")
        await asyncio.sleep(1)
        return
    task_id = created.json()["id"]
    if inject:
        findings.injected.add(task_id)
    while True:
        await asyncio.sleep(0.5)
        read = await client.get(f"/api/tasks/{task_id}")
        findings.scan("GET /api/tasks/{id}", read.content)
        if read.status_code != 200:
            findings.errors.append(f"GET /api/tasks/{task_id} -> {read.status_code}")
            continue
        status = read.json()["status"]
        if status in TERMINAL:
            findings.task_outcomes[task_id] = status
            findings.task_times.append((started - findings.started, time.monotonic() - started))
            return


async def one_chat_turn(client: httpx.AsyncClient, findings: Findings, session: str) -> None:
    message = {"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": "Go"}]}
    body = bytearray()
    async with client.stream(
        "POST", "/api/chat", json={"id": session, "model": "fake/fake-chat", "message": message}
    ) as response:
        async for chunk in response.aiter_bytes():
            body += chunk
    findings.scan("POST /api/chat (stream)", bytes(body))
    findings.chat_turns += 1
    if response.status_code != 200 or b'"type":"finish"' not in body:
        findings.chat_turns_without_finish += 1
        findings.errors.append(f"chat turn {response.status_code}: {bytes(body[-200:])!r}")


async def load(client: httpx.AsyncClient, findings: Findings, args: argparse.Namespace, until: float) -> None:
    """`tasks` task loops and `chats` chat loops, each starting its next run when one ends."""
    in_flight = max(1, round(args.capacity * args.load))
    chats = 1
    tasks = in_flight - chats
    numbers = iter(range(10**9))

    async def task_loop() -> None:
        while time.monotonic() < until:
            try:
                await one_task(client, findings, next(numbers), args.failure_every)
            except httpx.HTTPError as exc:
                findings.errors.append(f"task: {type(exc).__name__}: {exc}")

    async def chat_loop() -> None:
        created = await client.post("/api/sessions", json={"title": "soak"})
        session = created.json()["id"]
        turns = 0
        while time.monotonic() < until:
            # A new session every 20 turns, so the thread the runner loads stays the size of real use.
            if turns and turns % 20 == 0:
                created = await client.post("/api/sessions", json={"title": "soak"})
                session = created.json()["id"]
            try:
                await one_chat_turn(client, findings, session)
            except httpx.HTTPError as exc:
                findings.errors.append(f"chat: {type(exc).__name__}: {exc}")
            turns += 1

    await asyncio.gather(*(task_loop() for _ in range(tasks)), *(chat_loop() for _ in range(chats)))


async def sample(stack: Launched, pool: asyncpg.Pool, findings: Findings, until: float, every_s: float) -> None:
    """RSS of every service process and the stuck-task check, every `every_s` until `until`."""
    while time.monotonic() < until + every_s:
        at = time.monotonic() - findings.started
        for name, child in children(stack).items():
            with contextlib.suppress(psutil.NoSuchProcess):
                rss = psutil.Process(child["pid"]).memory_info().rss / 2**20
                findings.rss.setdefault(name, []).append((at, rss, child["pid"]))
        stuck = await pool.fetch(
            "SELECT id::text FROM popagent_agent_tasks WHERE status IN ('running', 'cancelling') "
            "AND COALESCE(heartbeat_at, started_at) < now() - make_interval(secs => $1)",
            HEARTBEAT_TIMEOUT_S + SWEEP_INTERVAL_S,
        )
        findings.stuck.update(row["id"] for row in stuck)
        await asyncio.sleep(every_s)


def slope_percent_per_hour(points: list[tuple[float, float, int]], warmup_s: float) -> float | None:
    """Least-squares slope of RSS over time after the warm-up, in % of its mean per hour."""
    kept = [(t, rss) for t, rss, _ in points if t >= warmup_s]
    if len(kept) < 3:
        return None
    times, values = [t for t, _ in kept], [rss for _, rss in kept]
    mean_t, mean_v = statistics.fmean(times), statistics.fmean(values)
    spread = sum((t - mean_t) ** 2 for t in times)
    slope_per_s = sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True)) / spread
    return slope_per_s * 3600 / mean_v * 100


def scan_files(findings: Findings, label: str, root: Path, control: bytes) -> tuple[int, int, int]:
    """Look for the canary in every file under `root`; (files, bytes) read, and the files holding
    `control`: text the run is known to have put there, so a search that reads nothing shows."""
    files = size = controls = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        files += 1
        size += len(data)
        controls += control in data
        form = find_canary(data)
        if form is not None:
            findings.leaks.setdefault(f"{label}: {path.relative_to(root)}", form)
    return files, size, controls


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def settle(pool: asyncpg.Pool, timeout_s: float) -> int:
    """Wait until no task is queued or live (remediations included); the number left otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = await pool.fetchval("SELECT count(*) FROM popagent_agent_tasks WHERE status NOT IN " + _terminal_sql())
        if left == 0 or time.monotonic() > deadline:
            return int(left)
        await asyncio.sleep(1)


def _terminal_sql() -> str:
    return "(" + ", ".join(f"'{status}'" for status in sorted(TERMINAL)) + ")"


async def run(args: argparse.Namespace) -> None:
    seconds = args.hours * 3600 if args.hours else args.minutes * 60
    findings = Findings()
    with (
        tempfile.TemporaryDirectory(prefix="popagent-bench-soak-") as tmp,
        model_server(50, 20.0, FAILURE_MARKER) as model_url,
    ):
        env = {"NINEROUTER_URL": model_url}
        if args.runner_workers:
            env["POPAGENT_AGENT_RUNNER_WORKERS"] = str(args.runner_workers)
        stack = launch(Path(tmp), env)
        try:
            await asyncio.to_thread(stack.wait_running, 300)
            keep_draining(stack)
            dsn = tasks_database(stack)
            async with (
                asyncpg.create_pool(dsn, min_size=1, max_size=2, server_settings={"search_path": "tasks"}) as pool,
                httpx.AsyncClient(base_url=stack.url, headers={"x-popagent-key": stack.api_key}, timeout=120) as client,
            ):
                stored = await client.post(
                    "/api/secrets", json={"resourceId": CANARY_RESOURCE, "name": CANARY_NAME, "value": CANARY}
                )
                findings.scan("POST /api/secrets", stored.content)
                if stored.status_code not in (200, 201):
                    raise RuntimeError(f"storing the canary: {stored.status_code} {stored.text[:300]}")
                bound = await client.post(
                    f"/api/secrets/{CANARY_RESOURCE}/{CANARY_NAME}/origins", json={"origin": CANARY_ORIGIN}
                )
                findings.scan("POST /api/secrets/.../origins", bound.content)
                findings.started = time.monotonic()
                until = findings.started + seconds
                in_flight = max(1, round(args.capacity * args.load))
                print(
                    f"soak: {seconds / 60:g} min, {in_flight} runs in flight of {args.capacity} "
                    f"({in_flight / args.capacity:.0%}: 1 chat, {in_flight - 1} tasks), "
                    f"1 task in {args.failure_every} fails, canary secret stored",
                    flush=True,
                )
                sampler = asyncio.create_task(sample(stack, pool, findings, until, args.sample_s))
                await load(client, findings, args, until)
                left = await settle(pool, 120)
                await sampler
                counts = {
                    (row["kind"], row["status"]): row["n"]
                    for row in await pool.fetch(
                        "SELECT kind, status, count(*) AS n FROM popagent_agent_tasks GROUP BY 1, 2"
                    )
                }
                injected_failed = await pool.fetchval(
                    "SELECT count(*) FROM popagent_agent_tasks WHERE id = ANY($1::uuid[]) "
                    "AND status IN ('failed', 'dead-letter')",
                    list(findings.injected),
                )
                remediations_of_injected = await pool.fetchval(
                    "SELECT count(*) FROM popagent_agent_tasks WHERE kind = 'remediation' "
                    "AND parent_task_id = ANY($1::uuid[])",
                    list(findings.injected),
                )
                for path in ("/api/secrets", "/api/observability/logs?limit=500", "/api/observability/traces"):
                    answer = await client.get(path)
                    findings.scan(f"GET {path}", answer.content)
                    if answer.status_code != 200:
                        findings.errors.append(f"GET {path} -> {answer.status_code}")
            final_children = children(stack)
        finally:
            stack.stop()
        # Controls: a task's prompt is stored in PostgreSQL, every turn's outcome is a NATS event, the
        # service logs name their processes.
        log_files, log_bytes, log_control = scan_files(findings, "log", stack.data_dir / "logs", b"popagent")
        nats_files, nats_bytes, nats_control = scan_files(
            findings, "NATS store", stack.data_dir / "nats", b"popagent.agent_runner.turn.completed"
        )
        pg_files, pg_bytes, pg_control = scan_files(
            findings,
            "PostgreSQL data",
            stack.data_dir / "postgres",
            f"soak task {len(findings.task_outcomes) // 2}:".encode(),
        )
        report(findings, seconds, counts, int(injected_failed), int(remediations_of_injected), left, final_children)
        print(
            f"  canary searched in {findings.responses_scanned} responses ({findings.response_bytes / 2**20:.1f} MiB), "
            f"{log_files} log files ({log_bytes / 2**20:.1f} MiB), {nats_files} NATS store files "
            f"({nats_bytes / 2**20:.1f} MiB), {pg_files} PostgreSQL files ({pg_bytes / 2**20:.1f} MiB): "
            f"{len(findings.leaks)} places (target 0: {'ok' if not findings.leaks else 'MISSED'})"
        )
        controls_seen = log_control and nats_control and pg_control
        print(
            f"  controls (text the run put there, found by the same search): logs {log_control} files, "
            f"NATS store {nats_control}, PostgreSQL {pg_control} ({'ok' if controls_seen else 'MISSED: a search read nothing'})"
        )
        for where, form in sorted(findings.leaks.items()):
            print(f"    canary found ({form} form) in {where}")


def report(
    findings: Findings,
    seconds: float,
    counts: dict[tuple[str, str], int],
    injected_failed: int,
    remediations: int,
    left: int,
    final_children: dict[str, dict[str, int]],
) -> None:
    warmup = max(60.0, seconds * 0.1)
    print(f"\nRSS per process (slope over the samples after the first {warmup:.0f} s; target < 1 %/h):")
    if seconds < 1800:
        print("  (a run under 30 minutes: the slope is mostly caches and pools still filling, not a leak rate)")
    for name, points in sorted(findings.rss.items()):
        slope = slope_percent_per_hour(points, warmup)
        restarts = final_children.get(name, {}).get("restarts", 0)
        verdict = "too few samples" if slope is None else ("ok" if slope < 1.0 else "MISSED")
        shown = "   n/a" if slope is None else f"{slope:+6.2f}"
        print(
            f"  {name:16} {points[0][1]:7.1f} -> {points[-1][1]:7.1f} MiB  {shown} %/h  "
            f"restarts {restarts}  ({verdict})"
        )
    user_tasks = {status: n for (kind, status), n in counts.items() if kind == "task"}
    remediation_tasks = {status: n for (kind, status), n in counts.items() if kind == "remediation"}
    created = len(findings.task_outcomes)
    injected = len(findings.injected)
    failed_terminal = user_tasks.get("failed", 0) + user_tasks.get("dead-letter", 0)
    completed = user_tasks.get("completed", 0)
    print(f"\ntasks: {created} created and followed to the end, {injected} with an injected failure")
    print(
        f"  user tasks by state: {dict(sorted(user_tasks.items()))}; remediations: {dict(sorted(remediation_tasks.items()))}"
    )
    verdict = "ok" if failed_terminal == injected == injected_failed else "MISSED"
    print(
        f"  terminal failures (failed + dead-letter) {failed_terminal} = injected {injected} "
        f"({injected_failed} of them the injected ones; target equal: {verdict}); "
        f"dead-letter {user_tasks.get('dead-letter', 0)}"
    )
    print(
        f"  uninjected tasks completed: {completed} of {created - injected} "
        f"({'ok' if completed == created - injected else 'MISSED'}); "
        f"one remediation per injected failure: {remediations} ({'ok' if remediations == injected else 'MISSED'})"
    )
    print(
        f"  stuck running > {HEARTBEAT_TIMEOUT_S + SWEEP_INTERVAL_S:.0f} s without a heartbeat: {len(findings.stuck)}; "
        f"left queued or running 120 s after the load: {left} "
        f"(target 0: {'ok' if not findings.stuck and not left else 'MISSED'})"
    )
    print(
        f"chat: {findings.chat_turns} turns, {findings.chat_turns_without_finish} without a finish event; "
        f"{len(findings.errors)} request errors"
    )
    for error in findings.errors[:10]:
        print(f"    {error}")
    times = [(at, took) for at, took in findings.task_times if at >= warmup]
    if len(times) >= 20:
        tenth = max(10, len(times) // 10)
        first, last = [t for _, t in times[:tenth]], [t for _, t in times[-tenth:]]
        print(
            f"task created -> terminal: first tenth after warm-up p50 {statistics.median(first):.2f} s "
            f"p95 {percentile(first, 0.95):.2f} s; last tenth p50 {statistics.median(last):.2f} s "
            f"p95 {percentile(last, 0.95):.2f} s ({percentile(last, 0.95) / percentile(first, 0.95):.2f}x)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the load runs")
    parser.add_argument("--hours", type=float, default=0.0, help="instead of --minutes: a soak of hours (the row: 4)")
    parser.add_argument("--capacity", type=int, default=10, help="runs one tasks worker takes at once")
    parser.add_argument("--load", type=float, default=0.6, help="share of the capacity kept in flight")
    parser.add_argument("--failure-every", type=int, default=100, help="one task in this many fails (1 %%)")
    parser.add_argument("--sample-s", type=float, default=15.0, help="seconds between RSS and stuck-task samples")
    parser.add_argument("--runner-workers", type=int, default=0, help="agent-runner workers (0: make run's default)")
    uvloop.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
