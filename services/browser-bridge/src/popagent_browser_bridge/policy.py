"""A browser profile's network policy: which origins its tabs may load.

Origins are `scheme://host[:port]` of http(s) URLs, the host lower-cased and IDNA-encoded and the
default port left out, so `HTTPS://Example.com:443/x` and `https://example.com` are one origin. The
blocked list is checked first; a non-empty allowed list then admits only its origins. `about:blank`
is always allowed (the bridge blanks tabs with it); any other non-http(s) URL (file:, data:,
javascript:, chrome:) is refused under a policy that lists allowed origins.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from popagent_core.errors import InvalidArgument

MAX_ORIGINS = 200
DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str) -> str | None:
    """The http(s) origin of `url`, or None when it is not an http(s) URL with a host."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in DEFAULT_PORTS or not host:
        return None
    try:
        host = host.rstrip(".").encode("idna").decode("ascii") if not host.isascii() else host.rstrip(".")
    except UnicodeError:
        return None
    if ":" in host:
        host = f"[{host}]"
    suffix = "" if port in (None, DEFAULT_PORTS[scheme]) else f":{port}"
    return f"{scheme}://{host}{suffix}"


def normalize_origins(values: Iterable[str], field: str) -> tuple[str, ...]:
    """The origins as stored, each checked: an http(s) origin with nothing after the host and port."""
    out: dict[str, None] = {}
    for value in values:
        origin = origin_of(value)
        path = urllib.parse.urlsplit(value.strip()).path if origin else ""
        if origin is None or path not in ("", "/") or "?" in value or "#" in value:
            raise InvalidArgument(f"{field}: {value[:200]!r} is not an origin such as https://example.com:8443")
        out[origin] = None
    if len(out) > MAX_ORIGINS:
        raise InvalidArgument(f"{field}: at most {MAX_ORIGINS} origins")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class OriginPolicy:
    profile: str
    allowed: frozenset[str]
    blocked: frozenset[str]

    def refusal(self, url: str) -> str | None:
        """Why `url` may not be loaded under this policy, or None when it may."""
        if url.strip() == "about:blank":
            return None
        origin = origin_of(url)
        if origin is None:
            if self.allowed:
                return f"{url[:200]!r} is not an http(s) URL and profile {self.profile!r} allows only listed origins"
            return None
        if origin in self.blocked:
            return f"{origin} is blocked by the network policy of browser profile {self.profile!r}"
        if self.allowed and origin not in self.allowed:
            return f"{origin} is not among the allowed origins of browser profile {self.profile!r}"
        return None
