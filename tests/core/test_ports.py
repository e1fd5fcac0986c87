"""`free_port`: the ports tests and the launcher hand to servers that bind them later."""

from __future__ import annotations

import random
import socket

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
