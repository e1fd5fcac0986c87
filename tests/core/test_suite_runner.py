"""`make test`'s runner (popagent_dev.suite): a run whose only failure is a crashed xdist worker is repeated
once; a failed test, or a second crash, fails the suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

# The suite's own xdist options (the Makefile's), on a scratch suite with its own configuration.
ARGUMENTS = ["-n", "2", "--dist", "loadgroup", "--max-worker-restart=0", "-p", "no:cacheprovider", "-q"]

PASSING = "def test_passes():\n    pass\n"
# Dies of SIGSEGV as a native crash would, a second in (the other worker's test has run by then);
# `CRASH_ONCE` crashes only while its marker file is absent.
CRASHING = (
    "import os, signal, time\n\ndef test_crashes():\n    time.sleep(1)\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
)
CRASH_ONCE = (
    "import os, pathlib, signal, time\n\n"
    "def test_crashes_the_first_time():\n"
    "    marker = pathlib.Path(__file__).with_suffix('.ran')\n"
    "    if not marker.exists():\n"
    "        marker.write_text('x')\n"
    "        time.sleep(1)\n"
    "        os.kill(os.getpid(), signal.SIGSEGV)\n"
)
FAILING = "def test_fails():\n    assert 1 == 2\n"


def run_suite(folder: Path, tests: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: minutes long\n")
    for name, text in tests.items():
        (folder / f"test_{name}.py").write_text(text)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "popagent_dev.suite", *ARGUMENTS],
        cwd=folder,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_run_whose_only_failure_is_a_crash_runs_once_more_and_passes(tmp_path: Path) -> None:
    run = run_suite(tmp_path, {"a": PASSING, "b": CRASH_ONCE, "c": PASSING})
    assert run.returncode == 0, run.stdout + run.stderr
    assert "A test process crashed (no test failed) while running test_b::test_crashes_the_first_time" in run.stdout
    assert run.stdout.count("the suite runs once more") == 1
    assert "3 passed" in run.stdout


def test_a_second_crash_fails_the_suite(tmp_path: Path) -> None:
    run = run_suite(tmp_path, {"a": PASSING, "b": CRASHING})
    assert run.returncode != 0, run.stdout
    assert run.stdout.count("the suite runs once more") == 1
    # Both runs end on the crash; how often pytest repeats the crash text in a summary depends on
    # the terminal's width, so the runs are counted by their result lines.
    assert "crashed while running 'test_b.py::test_crashes'" in run.stdout
    assert len(re.findall(r"^1 failed, 1 passed in ", run.stdout, re.MULTILINE)) == 2, run.stdout


def test_a_failed_test_beside_a_crash_fails_the_suite_without_a_second_run(tmp_path: Path) -> None:
    run = run_suite(tmp_path, {"a": FAILING, "b": CRASH_ONCE})
    assert run.returncode != 0, run.stdout
    assert "runs once more" not in run.stdout
    assert "test_a.py::test_fails" in run.stdout


SLOW_PASSING = "import os, pytest\n\n@pytest.mark.slow\ndef test_slow():\n    print('slow ran in', os.getpid())\n"
SLOW_FAILING = "import pytest\n\n@pytest.mark.slow\ndef test_slow_fails():\n    assert 1 == 2\n"


def test_slow_tests_run_beside_the_distributed_run_and_only_there(tmp_path: Path) -> None:
    run = run_suite(tmp_path, {"a": PASSING, "b": SLOW_PASSING, "c": PASSING})
    assert run.returncode == 0, run.stdout + run.stderr
    main, _, slow = run.stdout.partition("The tests marked slow, run beside the rest:")
    assert re.search(r"^2 passed in ", main, re.MULTILINE), run.stdout
    assert re.search(r"^1 passed, 2 deselected in ", slow, re.MULTILINE), run.stdout


def test_a_failed_slow_test_fails_the_suite(tmp_path: Path) -> None:
    run = run_suite(tmp_path, {"a": PASSING, "b": SLOW_FAILING})
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAILED test_b.py::test_slow_fails" in run.stdout.partition("run beside the rest:")[2], run.stdout
