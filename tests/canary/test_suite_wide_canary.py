"""The suite-wide canary check fails a test whose captured output leaks the secret."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parents[1]
# The inner run must not echo the leaked output back into this test's own capture.
INNER_ARGS = ("-p", "no:cacheprovider", "-o", "addopts=", "-o", f"pythonpath={TESTS_DIR}", "--show-capture=no")


@pytest.fixture(autouse=True)
def _bare_inner_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner run loads only the canary plugin: the installed ones (hypothesis and schemathesis
    among them) would be imported by every inner process for nothing."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


@pytest.mark.parametrize(
    "leak",
    [
        # The canary is random per process: the inner test leaks its own.
        "print(CANARY)",
        "import base64, sys; sys.stderr.write(base64.b64encode(CANARY.encode()).decode())",
        "import logging; logging.getLogger('x').warning(CANARY.encode().hex())",
    ],
    ids=["stdout-raw", "stderr-base64", "log-hex"],
)
def test_a_test_whose_output_holds_the_canary_fails(pytester: pytest.Pytester, leak: str) -> None:
    pytester.makeconftest('pytest_plugins = ["support.canary"]')
    pytester.makepyfile(f"from support.canary import CANARY\n\ndef test_leaky():\n    {leak}\n")
    result = pytester.runpytest_subprocess(*INNER_ARGS)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*canary secret leaked into captured output*"])


def test_a_clean_test_passes(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('pytest_plugins = ["support.canary"]')
    pytester.makepyfile("def test_clean():\n    print('nothing secret here')\n")
    result = pytester.runpytest_subprocess(*INNER_ARGS)
    result.assert_outcomes(passed=1)
