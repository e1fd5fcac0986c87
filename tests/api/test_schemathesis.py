"""Schemathesis against the live gateway's own OpenAPI document (RELIABILITY rows 14 and 24).

Schemathesis's own engine (its CLI, as a careful tester runs it) fuzzes every /api operation
with every check it has (`--checks all`: no 5xx, schema-valid data accepted, schema-invalid
data rejected, answers, statuses, content types and headers as documented, no route reachable
without the key, Allow headers, resources gone after a delete...) plus one of ours (the canary
never comes back, `api/schemathesis_hooks.py`), in all of its phases: the document's examples,
the coverage phase (each constraint's boundaries and violations), fuzzing in both data modes,
and the stateful phase along the document's links (a created session to its reads, saves,
hooks, chat and delete). Against a private stack holding the session's canary secret, so the
random writes cannot disturb other tests.

Cost on CI's 2 cores: the stack serves from this process's event loop (one core), so the
fuzzer runs in other processes: the operations split into SHARDS CLI processes for the
per-operation phases, and one more runs the stateful phase, all at once. Threads of one CLI
(`--workers`) would share one interpreter's lock, and CPython 3.11's AST constructor is not
safe across threads (hypothesis parses lambdas for their descriptions: "AST constructor
recursion depth mismatch").

What the suite runs and what the bench runs: the same test, every phase and every check, differing
only in POPAGENT_TEST_SCHEMATHESIS_EXAMPLES (examples per operation and mode in the fuzzing phase, and
the stateful phase's scenarios). The suite's default is 5: each operation is still fuzzed in both data
modes and the stateful phase still walks the links, while the examples and coverage phases do not
depend on it. The coverage phase (every constraint's boundaries and violations, some 7,000 cases) is
now most of the run's cost: about 90 CPU seconds in all at 5, against about 125 at the former 25.
`bench/schemathesis.py` runs the same test at the bar's 500, for the depth the suite leaves out.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.canary import canary_env
from support.stacks import API_KEY, API_STACK, StackSpec, start_stack

TESTS_DIR = str(Path(__file__).resolve().parents[1])
# Every service, so every operation of the document answers for real (the API stack plus tasks).
FUZZ_STACK = StackSpec("fuzz", API_STACK.hook_paths, API_STACK.services | {"tasks"})

MAX_EXAMPLES = int(os.environ.get("POPAGENT_TEST_SCHEMATHESIS_EXAMPLES", "5"))
# CLI processes sharing the per-operation phases (the stateful phase runs in one more).
SHARDS = 2
# Steps of one stateful scenario: create, then up to five linked calls.
STATEFUL_STEPS = 6
# Generous for a loaded machine: the time grows with the examples.
pytestmark = pytest.mark.timeout(300 + 6 * MAX_EXAMPLES)

CONFIG = """\
[auth.openapi.popagentKey]
api_key = "{key}"

[generation]
max-examples = {examples}
# Fixed seeds (one per shard): a failure is the same on the next run.
deterministic = true

[phases.stateful]
max-steps = {steps}

# A body over the gateway's cap is refused with 413 before it is read, which is a rejection
# too (schemathesis's own list leaves it out; a negative array of huge items reaches it).
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]

# The rules JSON Schema cannot state, each where it applies (everything else any check
# finds is declared in the document). Comparisons between fields, made against the stored
# row (a retry cap at least the retry base, a heartbeat timeout above its interval, shared
# budgets without async buffering): 422 naming the field.
[[operations]]
include-name-regex = '^PATCH /api/settings/(agent-runtime|memory)$'
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422", "429", "5xx"]

# An MCP server's change is checked against the stored server (a url for a stdio server, a
# transport switched without its url or command): 400 naming the field.
[[operations]]
include-name-regex = '^PATCH /api/mcp-servers/[{{]server_id[}}]$'
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "429", "5xx"]

# The MCP OAuth callback's state must be one /oauth/start issued, unused and unexpired, which no
# schema can state: any other is a 400 page saying so.
[[operations]]
include-name-regex = '^GET /api/mcp-servers/oauth/callback$'
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "429", "5xx"]

# A skillMd is a document (YAML front matter, then Markdown): 400 saying what does not parse.
[[operations]]
include-name-regex = '^(POST|PATCH) /api/agents/[{{]agent_id[}}]/skills'
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "429", "5xx"]

# An attachment is typed by its bytes (a binary other than an image or PDF is refused), and its
# name must leave a name once control characters and any folder are taken off: 400 saying which.
[[operations]]
include-name-regex = '^POST /api/sessions/[{{]session_id[}}]/attachments$'
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "429", "5xx"]

# A channel connection's credentials are its platform's (Slack: signingSecret; Telegram: a
# secretToken of Telegram's alphabet; Discord: a 64-hex publicKey), checked against the platform
# sent or stored: 400 naming the field.
[[operations]]
include-name-regex = '^(POST /api/channels|PATCH /api/channels/[{{]channel_id[}}])$'
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "429", "5xx"]
"""


def shards(document: dict[str, Any]) -> list[list[str]]:
    """The fuzzed operations' ids, dealt round-robin into SHARDS lists (the slow chat first)."""
    ids = [
        operation["operationId"]
        for path, item in document["paths"].items()
        if path.startswith("/api/")
        for operation in item.values()
    ]
    ids.sort(key=lambda operation_id: (operation_id != "chat_api_chat_post", operation_id))
    return [ids[index::SHARDS] for index in range(SHARDS)]


async def run_cli(config: Path, url: str, args: list[str]) -> tuple[int, str]:
    # In the test's own directory: the CLI keeps a cache (.schemathesis/) where it runs.
    """One `schemathesis run` over the live document; (exit code, its output)."""
    env = {
        **os.environ,
        **canary_env(),
        "PYTHONPATH": TESTS_DIR,
        "SCHEMATHESIS_HOOKS": "api.schemathesis_hooks",
    }
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "run",
        f"{url}/openapi.json",
        "--checks",
        "all",
        "--mode",
        "all",
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--no-shrink",
        "--suppress-health-check",
        "all",
        "--no-color",
        *args,
    ]
    process = await asyncio.create_subprocess_exec(
        *command, env=env, cwd=config.parent, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, output.decode(errors="replace")


def operations_tested(output: str) -> int:
    found = re.search(r"^\s*Tested: (\d+)", output, re.MULTILINE)
    return int(found.group(1)) if found else 0


async def test_schemathesis_finds_no_failure_in_the_live_gateway(
    pg_dsn: str, internal_credentials: tuple[dict[str, str], str], tmp_path: Path
) -> None:
    async with start_stack(pg_dsn, internal_credentials, tmp_path, FUZZ_STACK) as stack:
        async with httpx.AsyncClient(base_url=stack.url) as client:
            document = (await client.get("/openapi.json")).json()
        config = tmp_path / "schemathesis.toml"
        config.write_text(CONFIG.format(key=API_KEY, examples=MAX_EXAMPLES, steps=STATEFUL_STEPS))
        parts = shards(document)
        runs = [
            run_cli(
                config,
                stack.url,
                ["--phases", "examples,coverage,fuzzing", *[f"--include-operation-id={i}" for i in part]],
            )
            for part in parts
        ]
        stateful = run_cli(
            config,
            stack.url,
            ["--phases", "stateful", "--include-path-regex", "^/api/"],
        )
        results = await asyncio.gather(*runs, stateful)
    failed = [output for code, output in results if code != 0]
    assert not failed, "\n\n".join(failed)
    # Every /api operation of the document was fuzzed, each in exactly one shard.
    assert [operations_tested(output) for _, output in results[:-1]] == [len(part) for part in parts]
    assert sum(len(part) for part in parts) > 70
