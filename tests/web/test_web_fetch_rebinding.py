"""RELIABILITY row 18, DNS rebinding against webFetch: a name server that flips its answer between a
public and a refused address on every query (TTL 0), 1,000 flips, with and without a redirect back
to the same name, and 0 connections to a refused address (tests/support/rebinding.py).

The page server closes every connection after its answer, so each fetch resolves afresh.
"""

from __future__ import annotations

from popagent_agent_runner.web.page_fetcher import FetchRefused, PageFetcher
from popagent_core.address_guard import GuardedBackend
from support.rebinding import PUBLIC_ADDRESS, PrivateListener, RebindingDns, RoutePublicToLocal
from support.web_standins import Page, PageServer, redirect

QUERIES = 1_001  # 1,000 flips


def fetcher_through(dns: RebindingDns, network: RoutePublicToLocal) -> PageFetcher:
    backend = GuardedBackend(allow_private=False, resolver=dns.resolve, inner=network)
    return PageFetcher(allow_private=False, timeout_s=5.0, max_bytes=4096, backend=backend)


async def test_a_rebinding_page_name_never_gets_a_connection_to_a_refused_address() -> None:
    async with PageServer() as public, RebindingDns() as dns, PrivateListener() as private:
        public.pages["/"] = Page(body=b"<p>public</p>")
        network = RoutePublicToLocal(public.port)
        fetcher = fetcher_through(dns, network)
        fetched, refused = 0, 0
        try:
            for _ in range(QUERIES):
                # The URL names the private listener's port: a refused address let through lands there.
                try:
                    page = await fetcher.fetch(f"http://rebind.test:{private.port}/")
                    assert page.markdown == "public"
                    fetched += 1
                except FetchRefused:
                    refused += 1
        finally:
            await fetcher.aclose()
    assert dns.queries == QUERIES and dns.flips == QUERIES - 1
    assert set(dns.ttls) == {0}
    assert (fetched, refused) == (QUERIES // 2 + 1, QUERIES // 2)
    assert private.connections == 0
    assert set(network.connected) == {PUBLIC_ADDRESS}
    assert public.connections == fetched


async def test_a_redirect_back_to_a_rebinding_name_is_refused_at_its_own_lookup() -> None:
    """The public page redirects to the same name; that hop's lookup gets the refused answer."""
    async with PageServer() as public, RebindingDns() as dns, PrivateListener() as private:
        public.pages["/"] = redirect(f"http://rebind.test:{private.port}/inside")
        network = RoutePublicToLocal(public.port)
        fetcher = fetcher_through(dns, network)
        refused = 0
        try:
            for _ in range(QUERIES // 2):
                try:
                    await fetcher.fetch(f"http://rebind.test:{private.port}/")
                except FetchRefused:
                    refused += 1
        finally:
            await fetcher.aclose()
    assert refused == QUERIES // 2
    assert dns.queries == 2 * (QUERIES // 2) and set(dns.ttls) == {0}
    assert private.connections == 0
    assert set(network.connected) == {PUBLIC_ADDRESS}
    assert [seen.path for seen in public.requests] == ["/"] * (QUERIES // 2)
