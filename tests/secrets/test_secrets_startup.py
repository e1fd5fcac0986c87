"""A bad POPAGENT_SECRET_KEY stops the real process at start: exit 2, one line, no value."""

from __future__ import annotations

import base64
import os
import subprocess
import sys

import pytest
from secrets_support import new_key, process_env

from popagent_core.credentials import generate_credentials

# Valid for everything but the key under test, so the only complaint is about the key.
_, CALLERS = generate_credentials()
OTHERWISE_VALID = {"DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none", "POPAGENT_INTERNAL_CALLERS": CALLERS}

NOT_BASE64 = "this is not base64 but looks secret!!"
SHORT = base64.b64encode(b"sixteen byte key").decode()
LONG = base64.b64encode(os.urandom(48)).decode()
URLSAFE = base64.urlsafe_b64encode(b"\xfb" * 32).decode()  # '-' and '_' are not standard base64
ZERO = base64.b64encode(bytes(32)).decode()


def start(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "popagent_secrets", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        (None, "is required but not set"),
        ("", "is required but not set"),
        (NOT_BASE64, "must be standard base64"),
        (SHORT, "must decode to exactly 32 bytes (got 16)"),
        (LONG, "must decode to exactly 32 bytes (got 48)"),
        (URLSAFE, "must be standard base64"),
        (ZERO, "must not be all zero bytes"),
    ],
    ids=["missing", "empty", "not-base64", "16-bytes", "48-bytes", "urlsafe", "all-zero"],
)
def test_bad_key_exits_2_with_one_line_naming_the_variable(key: str | None, reason: str) -> None:
    check_refused(key, reason)


@pytest.mark.parametrize(
    ("key", "reason"),
    [(None, "is required but not set"), (SHORT, "must decode to exactly 32 bytes (got 16)")],
    ids=["missing", "16-bytes"],
)
def test_reencrypt_refuses_a_bad_key_the_same_way(key: str | None, reason: str) -> None:
    check_refused(key, reason, "reencrypt")


def check_refused(key: str | None, reason: str, *command: str) -> None:
    """Start the real process with `key`: exit 2, one line naming the variable, no value."""
    env = process_env(**OTHERWISE_VALID)
    if key is not None:
        env["POPAGENT_SECRET_KEY"] = key
    result = start(env, *command)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0] == f"popagent-secrets: bad configuration: POPAGENT_SECRET_KEY {reason}"
    if key:
        assert key not in result.stderr
        assert key.strip("=") not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("previous", "reason"),
    [
        (f"{new_key()},{NOT_BASE64}", "key 2 must be standard base64"),
        (SHORT, "key 1 must decode to exactly 32 bytes (got 16)"),
    ],
    ids=["second-not-base64", "first-too-short"],
)
def test_bad_previous_keys_exit_2_without_echoing_them(previous: str, reason: str) -> None:
    env = process_env(
        **OTHERWISE_VALID,
        POPAGENT_SECRET_KEY=new_key(),
        POPAGENT_SECRET_PREVIOUS_KEYS=previous,
    )
    result = start(env)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"popagent-secrets: bad configuration: POPAGENT_SECRET_PREVIOUS_KEYS {reason}"
    ]
    for part in previous.split(","):
        assert part not in result.stderr


def test_current_key_repeated_as_previous_is_refused() -> None:
    key = new_key()
    env = process_env(**OTHERWISE_VALID, POPAGENT_SECRET_KEY=key, POPAGENT_SECRET_PREVIOUS_KEYS=key)
    result = start(env)
    assert result.returncode == 2
    assert "POPAGENT_SECRET_PREVIOUS_KEYS must not repeat a key" in result.stderr
    assert key not in result.stderr
