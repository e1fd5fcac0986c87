"""`free_port`: the ports tests and the launcher hand to servers that bind them later."""

from __future__ import annotations

import random
import socket
import subprocess
import sys

import pytest

from popagent_dev import embedded
from popagent_dev.embedded import _ephemeral_range, free_port


def test_a_free_port_lies_outside_the_range_the_kernel_gives_outgoing_connections() -> None:
    # An ephemeral port may be taken by any connect() before the server binds it.
    low, high = _ephemeral_range()
    ports = {free_port() for _ in range(50)}
    assert all(not low <= port <= high for port in ports), sorted(ports)
    assert len(ports) > 40  # random picks, not one port over and over


def test_a_port_held_by_a_listener_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two generators with one seed: the first tells which port the second (free_port's) picks first.
    monkeypatch.setattr(embedded, "_port_picker", random.Random(7))
    first_pick = free_port()
    monkeypatch.setattr(embedded, "_port_picker", random.Random(7))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", first_pick))
        holder.listen()
        port = free_port()
        assert port != first_pick
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", port))


PICK_IN_A_CHILD = """
import random, sys
from popagent_dev import embedded
embedded._port_picker = random.Random(int(sys.argv[1]))
print(embedded.free_port(), flush=True)
sys.stdin.read()  # alive, holding its claim, until the test closes its stdin
"""


def child_pick(seed: int) -> tuple[subprocess.Popen[str], int]:
    child = subprocess.Popen(
        [sys.executable, "-c", PICK_IN_A_CHILD, str(seed)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    return child, int(child.stdout.readline())


def test_a_port_another_live_process_picked_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two stacks starting at once (the suite's two workers) must not both get the port the first
    # has picked and not bound yet: same seed, same first candidate, one claim.
    seed = random.randrange(1 << 30)
    child, picked = child_pick(seed)
    try:
        monkeypatch.setattr(embedded, "_port_picker", random.Random(seed))
        assert free_port() != picked
    finally:
        child.communicate("", timeout=10)
    # Once its picker is gone, the port is free to pick again.
    monkeypatch.setattr(embedded, "_port_picker", random.Random(seed))
    assert free_port() == picked


def test_one_process_never_gets_one_port_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    # The launcher picks every service's port before any binds: a repeat would give two services one port.
    seed = random.randrange(1 << 30)
    monkeypatch.setattr(embedded, "_port_picker", random.Random(seed))
    first = free_port()
    monkeypatch.setattr(embedded, "_port_picker", random.Random(seed))
    assert free_port() != first
