"""Exact HTTPS origins (scheme + host + port) for secret bindings.

One canonical form, the one a browser reports as `location.origin`:
`https://<lowercase IDNA A-label host>[:<port unless 443>]`. Anything that is not
plainly an origin is refused with a reason rather than repaired, because every repair
is a way for a look-alike (`example.com.evil.com`, `example.com@evil.com`, `http://`,
a homograph, a trailing dot, another port, a path, a wildcard) to match.
"""

from __future__ import annotations

import ipaddress
import re

import idna

from popagent_core.errors import InvalidArgument

MAX_ORIGIN_LENGTH = 300
DEFAULT_HTTPS_PORT = 443
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_PORT = re.compile(r"[0-9]{1,5}")
# Characters that would make the string more than scheme://host[:port], each with its reason.
_REFUSED = (
    ("@", "must not contain userinfo ('@')"),
    ("/", "must not contain a path"),
    ("?", "must not contain a query"),
    ("#", "must not contain a fragment"),
    ("*", "must not contain a wildcard"),
    ("\\", "must not contain a backslash"),
    ("%", "must not contain percent-encoding"),
)


class InvalidOrigin(InvalidArgument):
    """Not an exact https origin."""


def normalize_origin(raw: str) -> str:
    """The canonical form of an exact https origin, or InvalidOrigin naming what is wrong."""
    if not raw:
        raise InvalidOrigin("origin is required")
    if len(raw) > MAX_ORIGIN_LENGTH:
        raise InvalidOrigin(f"origin must be at most {MAX_ORIGIN_LENGTH} characters")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in raw):
        raise InvalidOrigin("origin must not contain whitespace or control characters")
    scheme, separator, rest = raw.partition("://")
    if not separator:
        raise InvalidOrigin("origin must look like https://host[:port]")
    if scheme.lower() != "https":
        raise InvalidOrigin("origin must use https")
    # `https://example.com/` names the same origin; any longer path does not.
    if rest.endswith("/") and rest.count("/") == 1:
        rest = rest[:-1]
    for char, reason in _REFUSED:
        if char in rest:
            raise InvalidOrigin(f"origin {reason}")
    host, port = _split_host_port(rest)
    canonical_host = _canonical_host(host)
    if port == DEFAULT_HTTPS_PORT:
        return f"https://{canonical_host}"
    return f"https://{canonical_host}:{port}"


def _split_host_port(rest: str) -> tuple[str, int]:
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise InvalidOrigin("origin has an unterminated IPv6 literal")
        host, after = rest[: end + 1], rest[end + 1 :]
        if after and not after.startswith(":"):
            raise InvalidOrigin("origin must look like https://host[:port]")
        port_text = after[1:] if after else None
    elif rest.count(":") > 1:
        raise InvalidOrigin("origin IPv6 hosts must be in brackets")
    else:
        host, colon, port_text_raw = rest.partition(":")
        port_text = port_text_raw if colon else None
    if port_text is None:
        return host, DEFAULT_HTTPS_PORT
    if not _PORT.fullmatch(port_text):
        raise InvalidOrigin("origin port must be a number")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise InvalidOrigin("origin port must be between 1 and 65535")
    return host, port


def _canonical_host(host: str) -> str:
    if not host:
        raise InvalidOrigin("origin host is required")
    if host.startswith("["):
        try:
            address = ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise InvalidOrigin("origin host is not a valid IPv6 address") from None
        return f"[{address.compressed}]"
    if host.endswith("."):
        raise InvalidOrigin("origin host must not end with a dot")
    try:
        # UTS #46 mapping (case folding, width folding) as browsers apply it, then A-labels.
        ascii_host = idna.encode(host, uts46=True, std3_rules=True).decode("ascii")
    except UnicodeError:  # idna.IDNAError included
        raise InvalidOrigin("origin host is not a valid domain name") from None
    # Mapping can produce a dot (U+3002 and friends), so check the result, not only the input.
    if ascii_host.endswith(".") or not ascii_host or len(ascii_host) > 253:
        raise InvalidOrigin("origin host is not a valid domain name")
    labels = ascii_host.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        raise InvalidOrigin("origin host is not a valid domain name")
    if labels[-1][0].isdigit():
        # Browsers read hosts ending in a number as IPv4 (0x7f.1, 2130706433); accept only
        # the canonical dotted quad so that a binding names one address one way.
        try:
            address = ipaddress.IPv4Address(ascii_host)
        except ValueError:
            raise InvalidOrigin("origin host is not a canonical IPv4 address") from None
        if str(address) != ascii_host:
            raise InvalidOrigin("origin host is not a canonical IPv4 address")
    return ascii_host
