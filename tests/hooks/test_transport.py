"""Outbound safety: address checks at connect time, TLS, redirects, keep-alive, stream caps."""

from __future__ import annotations

import ipaddress
import time

import pytest

from popagent_core.address_guard import address_allowed, address_category
from popagent_hooks.transport import HookFailure, HookTransport
from popagent_hooks_client.events import FailureClass
from support.https_receiver import HttpsReceiver, Reply, answer
from support.waiting import eventually

BODY = b'{"schemaVersion":1}'

# (address, category); None means a global address hooks may reach.
ADDRESSES: list[tuple[str, str | None]] = [
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("::1", "loopback"),
    ("10.0.0.1", "private"),
    ("10.255.255.255", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.0.1", "private"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("169.254.0.1", "link-local"),
    ("fe80::1", "link-local"),
    ("100.64.0.1", "cgnat"),
    ("100.127.255.254", "cgnat"),
    ("169.254.169.254", "metadata"),
    ("169.254.170.2", "metadata"),
    ("100.100.100.200", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:10.1.2.3", "private"),
    ("::ffff:169.254.169.254", "metadata"),
    ("64:ff9b::a00:1", "private"),
    ("64:ff9b::7f00:1", "loopback"),
    ("2002:7f00:1::", "loopback"),
    ("2002:a9fe:a9fe::", "metadata"),
    ("0.0.0.0", "reserved"),
    ("::", "reserved"),
    ("224.0.0.1", "reserved"),
    ("ff02::1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("240.0.0.1", "reserved"),
    ("198.18.0.1", "private"),
    ("192.0.2.1", "private"),
    ("8.8.8.8", None),
    ("1.1.1.1", None),
    ("100.63.255.255", None),
    ("100.128.0.0", None),
    ("172.32.0.1", None),
    ("2606:4700:4700::1111", None),
    ("::ffff:8.8.8.8", None),
]


@pytest.mark.parametrize(("address", "category"), ADDRESSES, ids=[a for a, _ in ADDRESSES])
def test_address_categories(address: str, category: str | None) -> None:
    ip = ipaddress.ip_address(address)
    assert address_category(ip) == category
    assert address_allowed(ip, allow_private=False) is (category is None)


@pytest.mark.parametrize(("address", "category"), ADDRESSES, ids=[a for a, _ in ADDRESSES])
def test_allowing_private_addresses_never_opens_metadata_or_reserved(address: str, category: str | None) -> None:
    opened = category in (None, "loopback", "private", "link-local", "cgnat")
    assert address_allowed(ipaddress.ip_address(address), allow_private=True) is opened


async def _post(transport: HookTransport, url: str, timeout_s: float = 2.0) -> bytes:
    return await transport.post(url, BODY, [], timeout_s)


async def test_loopback_targets_are_refused_at_connect_time_unless_allowed(receiver: HttpsReceiver) -> None:
    receiver.script("/hook", answer())
    strict = HookTransport(allow_private=False, ca_file=receiver.ca_file)
    try:
        for host in ("127.0.0.1", "localhost"):
            with pytest.raises(HookFailure) as caught:
                await _post(strict, receiver.url("/hook", host))
            assert caught.value.failure_class is FailureClass.TRANSPORT
            assert "address refused" in str(caught.value) and "loopback" in str(caught.value)
    finally:
        await strict.aclose()
    assert receiver.connections == 0
    relaxed = HookTransport(allow_private=True, ca_file=receiver.ca_file)
    try:
        assert b'"outcome"' in await _post(relaxed, receiver.url("/hook"))
    finally:
        await relaxed.aclose()


async def test_a_hostname_resolving_to_a_private_address_is_refused(receiver: HttpsReceiver) -> None:
    lookups: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.2", "127.0.0.1"]

    receiver.script("/hook", answer())
    strict = HookTransport(allow_private=False, ca_file=receiver.ca_file, resolver=resolver)
    try:
        with pytest.raises(HookFailure, match=r"hooks\.test resolves only to refused addresses"):
            await _post(strict, receiver.url("/hook", "hooks.test"))
    finally:
        await strict.aclose()
    assert lookups == ["hooks.test"]
    assert receiver.connections == 0


async def test_the_checked_address_is_the_one_connected_and_tls_still_verifies_the_name(
    receiver: HttpsReceiver,
) -> None:
    async def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    receiver.script("/hook", answer())
    transport = HookTransport(allow_private=True, ca_file=receiver.ca_file, resolver=resolver)
    try:
        await _post(transport, receiver.url("/hook", "hooks.test"))
        # The certificate does not name this host: the connection to the same address is refused.
        with pytest.raises(HookFailure) as caught:
            await _post(transport, receiver.url("/hook", "other.test"))
        assert caught.value.failure_class is FailureClass.TRANSPORT
    finally:
        await transport.aclose()
    assert receiver.requests[0].headers["host"].startswith("hooks.test")
    assert len(receiver.requests) == 1


async def test_an_untrusted_certificate_is_a_transport_failure(receiver: HttpsReceiver) -> None:
    receiver.script("/hook", answer())
    transport = HookTransport(allow_private=True)
    try:
        with pytest.raises(HookFailure) as caught:
            await _post(transport, receiver.url("/hook"))
    finally:
        await transport.aclose()
    assert caught.value.failure_class is FailureClass.TRANSPORT
    assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value)
    assert receiver.requests == []


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_redirects_are_never_followed(receiver: HttpsReceiver, transport: HookTransport, status: int) -> None:
    receiver.script("/hook", Reply(status=status, headers={"Location": receiver.url("/target")}))
    receiver.script("/target", answer())
    with pytest.raises(HookFailure, match=f"HTTP {status} redirect not followed") as caught:
        await _post(transport, receiver.url("/hook"))
    assert caught.value.failure_class is FailureClass.TRANSPORT
    assert receiver.requests_for("/target") == []


async def test_connections_are_kept_alive_and_reused(receiver: HttpsReceiver, transport: HookTransport) -> None:
    receiver.script("/hook", answer())
    for _ in range(10):
        await _post(transport, receiver.url("/hook"))
    assert len(receiver.requests) == 10
    assert receiver.connections == 1


async def test_a_never_ending_body_is_cut_at_the_cap_long_before_the_deadline(
    receiver: HttpsReceiver, transport: HookTransport
) -> None:
    receiver.script("/endless", Reply(endless_chunked=True))
    started = time.monotonic()
    with pytest.raises(HookFailure, match="exceeds 65536 bytes") as caught:
        await _post(transport, receiver.url("/endless"), timeout_s=10.0)
    assert caught.value.failure_class is FailureClass.MALFORMED_RESPONSE
    assert time.monotonic() - started < 2.0
    # The receiver notices the hang-up: the stream was cancelled, not drained.
    await eventually(lambda: receiver.abandoned_streams, within=2, interval=0.02, what="the receiver to notice")
    assert receiver.abandoned_streams == 1


async def test_a_declared_oversize_body_is_refused_without_reading_it(
    receiver: HttpsReceiver, transport: HookTransport
) -> None:
    receiver.script("/big", Reply(raw_body=b" " * (64 * 1024 + 1), drip_interval_s=0.5, drip_bytes=1024))
    started = time.monotonic()
    with pytest.raises(HookFailure, match="exceeds 65536 bytes"):
        await _post(transport, receiver.url("/big"), timeout_s=10.0)
    assert time.monotonic() - started < 1.0


async def test_cookies_set_by_a_receiver_are_never_sent_back(receiver: HttpsReceiver, transport: HookTransport) -> None:
    receiver.script("/hook", Reply(json_body={"schemaVersion": 1}, headers={"Set-Cookie": "session=abc; Path=/"}))
    await _post(transport, receiver.url("/hook"))
    await _post(transport, receiver.url("/hook"))
    assert "cookie" not in receiver.requests[1].headers


async def test_one_deadline_covers_the_whole_exchange(receiver: HttpsReceiver, transport: HookTransport) -> None:
    # Every byte arrives well within any per-read timeout, but the whole body takes ~2 s.
    receiver.script("/drip", Reply(raw_body=b" " * 40, drip_interval_s=0.05))
    started = time.monotonic()
    with pytest.raises(HookFailure) as caught:
        await _post(transport, receiver.url("/drip"), timeout_s=0.5)
    assert caught.value.failure_class is FailureClass.TIMEOUT
    assert 0.5 <= time.monotonic() - started < 0.8
