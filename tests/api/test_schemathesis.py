"""Schemathesis against the live gateway's own OpenAPI document (RELIABILITY rows 14 and 24).

Every operation of this suite's resources is fuzzed with schema-valid and schema-invalid
data (bounded: 20 examples per operation and mode) over real HTTP, against a private
stack so the random writes cannot disturb other tests. Checks: no 5xx, no invalid body
accepted, no route reachable without the key, answers match the documented schemas.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.config import SchemathesisConfig
from schemathesis.core.result import Ok

from support.canary import find_canary
from support.stacks import API_KEY, API_STACK, start_stack

pytestmark = pytest.mark.timeout(180)

MY_PATHS = r"^/api/(models|sessions|settings|agents|workspaces|secrets)"
MAX_EXAMPLES = 20


@schemathesis.check
def no_canary(ctx: Any, response: Any, case: Any) -> bool | None:
    """The stack holds the session's canary as a secret: no answer may ever carry it."""
    form = find_canary(response.content)
    if form is not None:
        raise AssertionError(f"canary secret in the response of {case.operation.label} ({form} form)")
    return None


CHECKS = [
    no_canary,
    not_a_server_error,
    negative_data_rejection,
    ignored_auth,
    response_schema_conformance,
    status_code_conformance,
    content_type_conformance,
]


def fuzz(document: dict[str, Any], base_url: str) -> tuple[int, list[str]]:
    """Run every selected operation in both modes; (operations run, failures)."""
    # The key goes through the document's own security scheme, so schemathesis knows which
    # header is the credential (and drops or corrupts it for the auth checks).
    # A body over the gateway's cap is refused with 413 before it is read, which is a rejection
    # too (schemathesis's own list leaves it out; a negative array of huge items reaches it).
    config = SchemathesisConfig.from_str(
        f'[auth.openapi.popagentKey]\napi_key = "{API_KEY}"\n'
        "[checks.negative_data_rejection]\n"
        'expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]\n'
    )
    schema = schemathesis.openapi.from_dict(document, config=config)
    schema = schema.include(path_regex=MY_PATHS).exclude(path_regex=r"/hooks$")
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        if not isinstance(result, Ok):
            failures.append(f"operation not loadable: {result.err()}")
            continue
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=MAX_EXAMPLES,
                database=None,
                deadline=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: schemathesis.Case) -> None:
                case.call_and_validate(
                    base_url=base_url, headers={"x-popagent-key": API_KEY}, checks=CHECKS, timeout=30
                )

            try:
                run()
            except (Exception, BaseExceptionGroup) as exc:
                failures.append(f"{operation.label} [{mode.value}]: {exc}")
    return operations, failures


async def test_schemathesis_finds_no_failure_in_the_live_gateway(
    pg_dsn: str, internal_credentials: tuple[dict[str, str], str], tmp_path: Path
) -> None:
    async with start_stack(pg_dsn, internal_credentials, tmp_path, API_STACK) as stack:
        async with httpx.AsyncClient(base_url=stack.url) as client:
            document = (await client.get("/openapi.json")).json()
        # The fuzzer is synchronous; the stack runs in this event loop, so it runs in a thread.
        operations, failures = await asyncio.to_thread(fuzz, document, stack.url)
    assert operations == 39
    assert failures == [], "\n\n".join(failures)
