"""The kernel's address guard reads every IPv4 spelling as the address it is, before any resolver."""

from __future__ import annotations

import ipaddress

import pytest

from popagent_core.address_guard import BlockedAddress, GuardedBackend, ip_literal


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("10.1", "10.0.0.1"),
        ("0", "0.0.0.0"),
        ("[::ffff:7f00:1]", "::ffff:7f00:1"),
        ("::1", "::1"),
    ],
)
def test_ip_literals_in_every_spelling(host: str, address: str) -> None:
    assert ip_literal(host) == ipaddress.ip_address(address)


@pytest.mark.parametrize("host", ["example.org", "1.2.3.4.5", "0x", "localhost", "1e100.net", ""])
def test_names_are_left_to_the_resolver(host: str) -> None:
    assert ip_literal(host) is None


async def test_a_numeric_host_never_reaches_the_resolver() -> None:
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["93.184.215.14"]

    guard = GuardedBackend(allow_private=False, resolver=resolver)
    with pytest.raises(BlockedAddress, match=r"127\.0\.0\.1 \(loopback\)"):
        await guard.resolve_allowed("2130706433", 80)
    assert await guard.resolve_allowed("public.example", 80) == ["93.184.215.14"]
    assert asked == ["public.example"]
