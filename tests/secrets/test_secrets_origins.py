"""Exact https origins: one canonical form, everything else refused with a reason."""

from __future__ import annotations

import pytest

from popagent_core.errors import InvalidArgument
from popagent_secrets.origins import normalize_origin


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("https://example.com", "https://example.com"),
        ("https://example.com/", "https://example.com"),
        ("HTTPS://Example.COM", "https://example.com"),
        ("https://example.com:443", "https://example.com"),
        ("https://example.com:8443", "https://example.com:8443"),
        ("https://login.example.co.uk", "https://login.example.co.uk"),
        ("https://bücher.example", "https://xn--bcher-kva.example"),
        ("https://xn--bcher-kva.example", "https://xn--bcher-kva.example"),
        ("https://\uff25XAMPLE.com", "https://example.com"),  # UTS #46 width folding, as browsers do
        ("https://127.0.0.1:8443", "https://127.0.0.1:8443"),
        ("https://[::1]:8443", "https://[::1]:8443"),
        ("https://[2001:DB8:0:0::1]", "https://[2001:db8::1]"),
        ("https://localhost:9000", "https://localhost:9000"),
    ],
)
def test_canonical_forms(raw: str, canonical: str) -> None:
    assert normalize_origin(raw) == canonical
    assert normalize_origin(canonical) == canonical


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "required"),
        ("example.com", "https://host"),
        ("http://example.com", "https"),
        ("ftp://example.com", "https"),
        ("//example.com", "https"),
        ("https://user@example.com", "userinfo"),
        ("https://example.com@evil.com", "userinfo"),
        ("https://user:pass@example.com", "userinfo"),
        ("https://example.com/login", "path"),
        ("https://example.com//", "path"),
        ("https://example.com?x=1", "query"),
        ("https://example.com#top", "fragment"),
        ("https://*.example.com", "wildcard"),
        ("https://*", "wildcard"),
        ("https://example.com\\@evil.com", "userinfo"),
        ("https://example.com\\evil", "backslash"),
        ("https://exa%6Dple.com", "percent"),
        ("https://example.com.", "dot"),
        ("https://example.com。", "domain"),  # ideographic full stop maps to a trailing dot
        ("https://example..com", "domain"),
        ("https://-example.com", "domain"),
        ("https://exa_mple.com", "domain"),
        ("https://example.com:", "port"),
        ("https://example.com:0", "port"),
        ("https://example.com:65536", "port"),
        ("https://example.com:+443", "port"),
        ("https://example.com:443:443", "brackets"),
        ("https://[::1", "unterminated"),
        ("https://[::1]x", "https://host"),
        ("https://[fe80::1%25eth0]", "percent"),
        ("https://0x7f.0.0.1", "IPv4"),
        ("https://2130706433", "IPv4"),
        ("https://127.1", "IPv4"),
        ("https://127.000.000.001", "IPv4"),
        ("https:// example.com", "whitespace"),
        ("https://example.com\n", "whitespace"),
        ("https://exa\x00mple.com", "control"),
        ("https://" + "a" * 300 + ".com", "at most"),
        ("https://" + "a" * 64 + ".com", "domain"),
    ],
)
def test_refused_with_reason(raw: str, reason: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        normalize_origin(raw)
    assert reason in str(caught.value)


# RELIABILITY row 25: look-alikes of https://example.com; none may normalise to it.
LOOK_ALIKES = [
    "https://example.com.evil.com",
    "https://example.com@evil.com",
    "https://evil.com#@example.com",
    "http://example.com",
    "https://ex\u0430mple.com",  # Cyrillic a (U+0430): homograph
    "https://examp1e.com",
    "https://example.com.",
    "https://example.com:8443",
    "https://example.com:444",
    "https://example.com/login",
    "https://*.example.com",
    "https://sub.example.com",
    "https://example.co",
    "https://example.com.evil.com:443",
    "wss://example.com",
]


@pytest.mark.parametrize("raw", LOOK_ALIKES)
def test_look_alikes_never_equal_the_real_origin(raw: str) -> None:
    try:
        normalized = normalize_origin(raw)
    except InvalidArgument:
        return
    assert normalized != "https://example.com"


def test_homograph_is_encoded_not_folded() -> None:
    assert normalize_origin("https://ex\u0430mple.com") == "https://xn--exmple-4nf.com"
