"""RELIABILITY row 18, DNS rebinding against hook URLs: a name server that flips its answer between
a public and a refused address on every query (TTL 0), 1,000 flips, and 0 connections to a refused
address (tests/support/rebinding.py has the attacker's server and the listener that counts).

Each handler answer closes its connection, so every post opens a new one and resolves afresh.
"""

from __future__ import annotations

from pathlib import Path

from popagent_hooks.transport import HookFailure, HookTransport
from popagent_hooks_client.events import FailureClass
from support.https_receiver import HttpsReceiver, Reply
from support.rebinding import PUBLIC_ADDRESS, PrivateListener, RebindingDns, RoutePublicToLocal

QUERIES = 1_001  # 1,000 flips


async def test_a_rebinding_hook_name_never_gets_a_connection_to_a_refused_address(tmp_path: Path) -> None:
    async with (
        HttpsReceiver(tmp_path, hostnames=("rebind.test",)) as public,
        RebindingDns() as dns,
        PrivateListener() as private,
    ):
        public.script(
            "/hook", Reply(json_body={"schemaVersion": 1, "outcome": "pass"}, headers={"Connection": "close"})
        )
        transport = HookTransport(allow_private=False, ca_file=public.ca_file, resolver=dns.resolve)
        network = RoutePublicToLocal(public.port)
        # Where the guard's allowed connections physically go (the public address is a local stand-in).
        transport.backend._inner = network
        answered, refused = 0, 0
        try:
            for _ in range(QUERIES):
                # The URL names the private listener's port: a refused address let through lands there.
                try:
                    await transport.post(f"https://rebind.test:{private.port}/hook", b"{}", [], timeout_s=5.0)
                    answered += 1
                except HookFailure as failure:
                    assert failure.failure_class is FailureClass.TRANSPORT
                    assert "address refused" in str(failure)
                    refused += 1
        finally:
            await transport.aclose()
    assert dns.queries == QUERIES and dns.flips == QUERIES - 1
    assert set(dns.ttls) == {0}
    assert (answered, refused) == (QUERIES // 2 + 1, QUERIES // 2)
    assert private.connections == 0
    assert set(network.connected) == {PUBLIC_ADDRESS}
    assert public.connections == len(network.connected) == answered
