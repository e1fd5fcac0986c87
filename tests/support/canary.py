"""pytest plugin: a canary secret that must never show up where plaintext must not go.

The canary is random per test session (per xdist worker) and recognizable
(`popagent-canary-…`). It contains characters that URL-encoding changes, so every
encoded form differs from the raw one. `assert_no_canary(data)` looks for it in:

- raw form (and its random core alone, in case only part of it leaked),
- base64 (standard and URL-safe alphabets, at all three byte alignments, so the value
  is found inside a larger base64 blob too, padded or not),
- hex (either case),
- URL-encoding (`quote` and `quote_plus`, escapes in either case).

Register it for the whole suite with `pytest_plugins = ["support.canary"]` in the root
`tests/conftest.py` (`tests/` is on pythonpath); until then a conftest may import the
`canary_secret` fixture from here.
"""

from __future__ import annotations

import base64
import os
import secrets
from urllib.parse import quote, quote_plus

import pytest

CANARY_PREFIX = "popagent-canary-"
# A process the session starts (the schemathesis CLI the fuzz test runs) is handed the same core.
CANARY_CORE_ENV = "POPAGENT_TEST_CANARY_CORE"
_CORE = os.environ.get(CANARY_CORE_ENV) or secrets.token_hex(16)
# '+', '=', '&', ' ' and '~' are all changed by at least one URL-encoding.
CANARY = f"{CANARY_PREFIX}{_CORE}+=& ~x"


def canary_env() -> dict[str, str]:
    """The environment a child process needs to know this session's canary."""
    return {CANARY_CORE_ENV: _CORE}


def _base64_cores(raw: bytes) -> list[bytes]:
    """Base64 fragments that appear whenever `raw` is base64-encoded inside anything.

    For each alignment (0, 1 or 2 bytes before it), encode with filler, then drop the
    characters that also depend on the filler or on what follows.
    """
    cores = []
    for offset in range(3):
        encoded = base64.b64encode(b"\x00" * offset + raw)
        start = 4 if offset else 0
        body_bytes = offset + len(raw)
        full_groups = body_bytes // 3
        core = encoded[start : full_groups * 4]
        cores.append(core)
        cores.append(core.translate(bytes.maketrans(b"+/", b"-_")))
    return [core for core in cores if len(core) >= 16]


def canary_forms(value: str = CANARY) -> list[tuple[str, bytes, bool]]:
    """(form name, byte pattern, compare case-insensitively) for every way `value` may leak,
    most specific first."""
    raw = value.encode()
    forms = [("raw", raw, False)]
    forms.extend(("base64", core, False) for core in _base64_cores(raw))
    forms.append(("hex", raw.hex().encode(), True))
    forms.append(("url-encoded", quote(value, safe="").lower().encode(), True))
    forms.append(("url-encoded (plus)", quote_plus(value, safe="").lower().encode(), True))
    if value == CANARY:
        # Last: a fragment of the value (the random core) without the rest.
        forms.append(("raw fragment", _CORE.encode(), False))
    return forms


def find_canary(data: str | bytes, value: str = CANARY) -> str | None:
    """The name of the first form of `value` found in `data`, or None."""
    blob = data.encode() if isinstance(data, str) else bytes(data)
    folded = blob.lower()
    for name, form, fold in canary_forms(value):
        if form in (folded if fold else blob):
            return name
    return None


def assert_no_canary(data: str | bytes, value: str = CANARY, where: str = "output") -> None:
    """Fail if `data` contains the canary in any of its forms (the message never quotes it)."""
    form = find_canary(data, value)
    assert form is None, f"canary secret leaked into {where} ({form} form)"


@pytest.fixture(scope="session")
def canary_secret() -> str:
    """The session's canary value: provision it as a secret, then check it never leaves."""
    return CANARY


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Across the whole suite: a test whose captured output (stdout, stderr, log records)
    holds the canary in any form fails, whatever it asserted itself."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    for title, content in report.sections:
        # A phase's report repeats the sections of the phases before it; judge each once.
        if not title.endswith(f" {report.when}"):
            continue
        form = find_canary(content)
        if form is not None and report.outcome != "failed":
            report.outcome = "failed"
            report.longrepr = f"canary secret leaked into captured output: {title} ({form} form)"
            return
