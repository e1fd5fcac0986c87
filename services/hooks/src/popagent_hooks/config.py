"""`POPAGENT_HOOKS`: one strict JSON document, checked whole at start.

Every refusal names the JSON path it is about (`$.hooks.PreToolUse[0].timeoutMs ...`)
and never echoes a signing secret. Hooks are server configuration only: this module is
the one place handlers come from, and nothing a user or session sends reaches it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from popagent_core.errors import ConfigurationError
from popagent_hooks_client.events import MCP_SERVER_MATCHER, Event, MatcherKind, matcher_applies

DEFAULT_TIMEOUT_MS = 2000
MAX_TIMEOUT_MS = 30_000
MAX_URL_LENGTH = 2048
SECRET_PREFIX = "whsec_"
# Standard Webhooks: secrets are 24 to 64 random bytes.
MIN_SECRET_BYTES, MAX_SECRET_BYTES = 24, 64

_ROOT_KEYS = {"version", "hooks"}
_HANDLER_KEYS = {"id", "type", "url", "matcher", "timeoutMs", "failureMode", "secret"}
_HANDLER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Runtime registry keys are identifiers (`getTime`); hyphens mean a createTool id was used.
_TOOL_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_SPECIALIST_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class HooksConfigError(ConfigurationError):
    """Invalid POPAGENT_HOOKS."""


@dataclass(frozen=True)
class HandlerConfig:
    id: str
    event: Event
    url: str
    # None matches every target; otherwise exact registry keys / specialist ids, or `mcp__<server>__.*`
    # for every tool of one of the users' MCP servers.
    matcher: frozenset[str] | None
    timeout_ms: int
    fail_closed: bool
    # The Standard Webhooks signing key; None: requests to this handler go unsigned.
    secret: bytes | None = field(repr=False)

    @property
    def signed(self) -> bool:
        return self.secret is not None

    def matches(self, target: str) -> bool:
        return self.matcher is None or matcher_applies(self.matcher, target)


@dataclass(frozen=True)
class HooksConfig:
    handlers: Mapping[Event, tuple[HandlerConfig, ...]]
    digest: str

    @classmethod
    def empty(cls) -> HooksConfig:
        return cls({}, _digest({}))

    def matching(self, event: Event, target: str) -> list[HandlerConfig]:
        """Handlers for `event` and `target`, in declaration order."""
        return [handler for handler in self.handlers.get(event, ()) if handler.matches(target)]


def _digest(handlers: Mapping[Event, tuple[HandlerConfig, ...]]) -> str:
    # Secrets stay out: the digest is handed to every caller.
    canonical = [
        [event.value, h.id, h.url, sorted(h.matcher) if h.matcher is not None else None, h.timeout_ms, h.fail_closed]
        for event, event_handlers in sorted(handlers.items())
        for h in event_handlers
    ]
    return hashlib.sha256(json.dumps(canonical, separators=(",", ":")).encode()).hexdigest()[:32]


def parse_allowed_hosts(raw: str) -> frozenset[str]:
    """`POPAGENT_HOOK_ALLOWED_HOSTS`: comma-separated exact hostnames (no wildcards, ports or paths)."""
    hosts = set()
    for entry in raw.split(","):
        host = entry.strip().lower()
        if not host:
            continue
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if any(ch in host for ch in "*/@?# \t") or (":" in host and not _is_ipv6(host)):
            raise ValueError(f"entry {entry.strip()!r} must be an exact hostname (no scheme, port, path or wildcard)")
        hosts.add(host)
    return frozenset(hosts)


def _is_ipv6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == 6
    except ValueError:
        return False


class _JsonObject(dict[str, Any]):
    """A parsed JSON object that remembers keys it saw twice, so the refusal can name their path."""

    duplicates: tuple[str, ...] = ()


def _object(pairs: list[tuple[str, Any]]) -> _JsonObject:
    result = _JsonObject(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        result.duplicates = tuple(key for key, _ in pairs if key in seen or seen.add(key))
    return result


def _check_object(value: Any, path: str, problem: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, problem)
    for key in getattr(value, "duplicates", ()):
        raise _fail(f"{path}.{key}", "appears twice (strict JSON allows each key once)")
    return value


def _refuse_constant(name: str) -> Any:
    raise HooksConfigError(f"contains {name}, which is not valid strict JSON")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fail(path: str, problem: str) -> HooksConfigError:
    return HooksConfigError(f"{path} {problem}")


def parse_hooks_config(raw: str, allowed_hosts: frozenset[str]) -> HooksConfig:
    """Parse and check the whole document; raises HooksConfigError naming the first bad path."""
    try:
        document = json.loads(raw, object_pairs_hook=_object, parse_constant=_refuse_constant)
    except HooksConfigError as exc:
        raise _fail("$", str(exc)) from None
    except json.JSONDecodeError as exc:
        raise _fail("$", f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    document = _check_object(document, "$", "must be a JSON object")
    for key in document:
        if key not in _ROOT_KEYS:
            raise _fail(f"$.{key}", "is not a known key (expected version, hooks)")
    if "version" not in document:
        raise _fail("$.version", "is required")
    if not _is_int(document["version"]) or document["version"] != 1:
        raise _fail("$.version", "must be 1")
    hooks = _check_object(document.get("hooks", {}), "$.hooks", "must be an object of event name -> handler list")

    seen_ids: dict[str, str] = {}
    handlers: dict[Event, tuple[HandlerConfig, ...]] = {}
    for event_name, entries in hooks.items():
        event_path = f"$.hooks.{event_name}"
        try:
            event = Event(event_name)
        except ValueError:
            raise _fail(event_path, "is not a hook event") from None
        if not isinstance(entries, list):
            raise _fail(event_path, "must be a list of handlers")
        parsed = []
        for index, entry in enumerate(entries):
            path = f"{event_path}[{index}]"
            handler = _parse_handler(entry, event, path, allowed_hosts)
            if handler.id in seen_ids:
                raise _fail(f"{path}.id", f"duplicates the id of {seen_ids[handler.id]}")
            seen_ids[handler.id] = path
            parsed.append(handler)
        if parsed:
            handlers[event] = tuple(parsed)
    return HooksConfig(handlers, _digest(handlers))


def _parse_handler(entry: Any, event: Event, path: str, allowed_hosts: frozenset[str]) -> HandlerConfig:
    entry = _check_object(entry, path, "must be an object")
    for key in entry:
        if key not in _HANDLER_KEYS:
            raise _fail(f"{path}.{key}", "is not a known handler key")
    for key in ("id", "type", "url"):
        if key not in entry:
            raise _fail(f"{path}.{key}", "is required")

    handler_id = entry["id"]
    if not isinstance(handler_id, str) or not _HANDLER_ID.match(handler_id):
        raise _fail(f"{path}.id", "must be 1-64 characters of letters, digits, '.', '_' or '-'")
    if entry["type"] != "http":
        raise _fail(f"{path}.type", 'must be "http"')
    url = _check_url(entry["url"], f"{path}.url", allowed_hosts)
    matcher = _check_matcher(entry.get("matcher"), "matcher" in entry, event, f"{path}.matcher")

    timeout_ms = entry.get("timeoutMs", DEFAULT_TIMEOUT_MS)
    if not _is_int(timeout_ms) or not 1 <= timeout_ms <= MAX_TIMEOUT_MS:
        raise _fail(f"{path}.timeoutMs", f"must be an integer from 1 to {MAX_TIMEOUT_MS}")

    gate = event.rules.gate
    failure_mode = entry.get("failureMode", "closed" if gate else "open")
    if failure_mode not in ("open", "closed"):
        raise _fail(f"{path}.failureMode", 'must be "open" or "closed"')
    if failure_mode == "closed" and not gate:
        raise _fail(f"{path}.failureMode", f'cannot be "closed": {event.value} is observational and always fails open')

    return HandlerConfig(
        id=handler_id,
        event=event,
        url=url,
        matcher=matcher,
        timeout_ms=timeout_ms,
        fail_closed=failure_mode == "closed",
        secret=_check_secret(entry["secret"], f"{path}.secret") if "secret" in entry else None,
    )


def _check_url(value: Any, path: str, allowed_hosts: frozenset[str]) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(path, "must be a non-empty string")
    if len(value) > MAX_URL_LENGTH:
        raise _fail(path, f"must be at most {MAX_URL_LENGTH} characters")
    if any(ord(ch) <= 0x20 or ord(ch) == 0x7F or ord(ch) > 0x7E for ch in value):
        raise _fail(path, "must be an ASCII URL without spaces or control characters")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise _fail(path, f"is not a valid URL ({exc})") from None
    if parts.scheme.lower() != "https":
        raise _fail(path, "must use https")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise _fail(path, "must not carry credentials")
    if parts.fragment or value.endswith("#"):
        raise _fail(path, "must not have a fragment")
    host = (parts.hostname or "").lower()
    if not host:
        raise _fail(path, "must name a host")
    if port == 0:
        raise _fail(path, "has an invalid port")
    if host not in allowed_hosts:
        raise _fail(path, f"host {host!r} is not listed in POPAGENT_HOOK_ALLOWED_HOSTS")
    return value


def _check_matcher(value: Any, present: bool, event: Event, path: str) -> frozenset[str] | None:
    kind = event.rules.matcher
    if not present:
        return None
    if kind is MatcherKind.NONE:
        raise _fail(path, f"is not accepted: {event.value} takes no matcher")
    if not isinstance(value, list) or not value:
        raise _fail(path, "must be a non-empty list of exact keys (omit it to match everything)")
    pattern = _TOOL_KEY if kind is MatcherKind.TOOL else _SPECIALIST_ID
    what = "a tool registry key such as getTime" if kind is MatcherKind.TOOL else "a specialist id"
    for index, key in enumerate(value):
        if isinstance(key, str) and kind is MatcherKind.TOOL and MCP_SERVER_MATCHER.match(key):
            continue
        if not isinstance(key, str) or not pattern.match(key):
            raise _fail(
                f"{path}[{index}]", f"must be {what} (exact, no wildcards but mcp__<server>__.* for an MCP server)"
            )
    if len(set(value)) != len(value):
        raise _fail(path, "lists a key twice")
    return frozenset(value)


def _check_secret(value: Any, path: str) -> bytes:
    problem = f'must be "{SECRET_PREFIX}" followed by base64 of {MIN_SECRET_BYTES}-{MAX_SECRET_BYTES} random bytes'
    if not isinstance(value, str) or not value.startswith(SECRET_PREFIX):
        raise _fail(path, problem)
    try:
        key = base64.b64decode(value.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise _fail(path, problem) from None
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise _fail(path, problem)
    return key
