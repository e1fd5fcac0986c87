"""Helpers shared by the kernel tests: subprocess environments, valid settings, JetStream reads."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.js.errors import NotFoundError

from popagent_core import subjects
from popagent_core.credentials import generate_credentials

REPO_ROOT = Path(__file__).resolve().parents[2]


# Settings that pass validation, for tests about the others.
VALID_DSN = "postgresql://popagent@127.0.0.1:1/popagent"
_, VALID_CALLERS = generate_credentials(("gateway",))


def unique_subject(owner: str = "evolution") -> str:
    """A subject of its own per test, so tests sharing one broker never see each other's events."""
    return f"popagent.{owner}.t{uuid.uuid4().hex[:12]}.happened"


async def stream_messages(js: JetStreamContext, subject: str) -> list[RawStreamMsg]:
    """Every message stored in the owner's stream for `subject`, in stream order."""
    stream = subjects.stream_name(subjects.owner_of(subject))
    found: list[RawStreamMsg] = []
    seq = 1
    while True:
        try:
            msg = await js.get_msg(stream, seq=seq, subject=subject, next=True)
        except NotFoundError:
            return found
        found.append(msg)
        assert msg.seq is not None
        seq = msg.seq + 1


def service_env(**values: str) -> dict[str, str]:
    """The environment of a service subprocess: this one without popagent settings, plus `values`."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("POPAGENT_") and key not in {"DATABASE_URL", "NATS_URL", "PYTHONWARNINGS"}
    }
    env.update(values)
    return env
