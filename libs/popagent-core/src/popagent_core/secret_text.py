"""Secrets in free text: find what looks like a credential, redact it, or tell that text carries one.

Every write that persists conversation text screens it here first: memories the agent writes,
observations, the outcome event of a turn (and so evolution's signals), log lines and spans.
`screen` says how many credentials it withheld, so a tool can tell the model what was not stored.
What learning would write into an agent's prompt or skills is refused outright when
`carries_secret` finds anything credential-like in it, redacted or not.

Detection is detect-secrets' (Yelp) default plugin set, run in-process on the plugins' own
patterns and entropy measures, with the library's heuristic filters:
- provider key formats: every regex-based plugin of the library (AWS, GitHub, GitLab, Slack,
  Stripe, JWT, private key headers, basic-auth URLs, ...), except `IPPublicDetector`: a public
  address is not a credential;
- keyword assignments (`password = "x"`, `api_key: x`, `"secret": "x"`): the keyword plugin's
  patterns, on the line around each keyword (they are written for one line of a file);
- high-entropy strings, unquoted (free text has no quotes to rely on): a run of 20+ base64
  characters above the library's limit (4.5 bits), or of 32+ hex digits above its hex limit
  (3.0 bits). A full 40-hex git SHA is such a run and is redacted: old GitHub tokens and many
  generated keys (`openssl rand -hex 20`) have exactly that shape; a short SHA (as git prints
  it, 7 to 12 digits) stays, and so does a UUID, with dashes or as the 32 hex digits of
  `uuid4().hex` (the ids this system mints).

What the library has no plugin for is kept as a pattern here: whole PEM private-key blocks (the
plugin finds the header, not the key's lines), `sk-`/`pk-`/`rk-` provider keys of the current
formats, Standard Webhooks `whsec_` keys, fine-grained `github_pat_` tokens, bearer tokens, and
the spoken forms of a credential ("my password is hunter2", "the token is ...", "pw: ...",
"passcode 4471"): the keyword plugin knows assignments in code, not sentences.

This runs on every turn's outcome, memory write and stored log line, so each detector only
looks near what could start a match, found by one case-sensitive search of the lower-cased
text: a provider format holds a run of 11+ key characters (the shortest, an Artifactory `AP…`
key, is 11) or is a basic-auth URL, a PEM header or a bearer token; a keyword or a spoken
credential starts with its word. Text with none of these costs that one search.
"""

from __future__ import annotations

import math
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from detect_secrets.filters.heuristic import (
    is_indirect_reference,
    is_potential_uuid,
    is_prefixed_with_dollar_sign,
    is_sequential_string,
    is_templated_secret,
)
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString, HexHighEntropyString
from detect_secrets.plugins.ip_public import IPPublicDetector
from detect_secrets.plugins.keyword import (
    CONFIG_DENYLIST_REGEX_TO_GROUP,
    DENYLIST_REGEX,
    QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP,
)
from detect_secrets.settings import default_settings, get_plugins

REDACTED = "[redacted]"


class Span(NamedTuple):
    start: int
    end: int


@dataclass(frozen=True)
class Screened:
    """Text with its credentials replaced by `[redacted]`, and how many there were."""

    text: str
    withheld: int


def _library_patterns() -> tuple[re.Pattern[str], ...]:
    # The library's default plugin list, built once under its own transient settings (which
    # restore the global ones on exit); only their patterns are kept, never shared state.
    with default_settings():
        plugins = get_plugins()
    return tuple(
        pattern
        for plugin in plugins
        if isinstance(plugin, RegexBasedDetector) and not isinstance(plugin, IPPublicDetector)
        for pattern in plugin.denylist
    )


_LIBRARY_FORMATS = _library_patterns()
# Where a library format's match can be (searched in the lower-cased text), and how far around
# it their patterns look: a match holds a run of 11+ key characters (or is a basic-auth URL or a
# PEM header), with at most a keyword prefix or a dotted part of a token beside it.
_FORMAT_HINT = re.compile(r"[a-z0-9+/=_-]{11,}|://|private key")
_FORMAT_REACH = 64
# Formats the library has no plugin for, matched in the lower-cased text (each starts with a
# literal, so a search costs little), where a word starts.
_OWN_FORMATS = (
    re.compile(r"-----begin [a-z ]*private key-----.*?-----end [a-z ]*private key-----", re.DOTALL),
    re.compile(r"(?:sk|pk|rk)-[a-z0-9_-]{16,}"),
    re.compile(r"whsec_[a-z0-9+/=]{8,}"),
    re.compile(r"github_pat_[a-z0-9_]{20,}"),
    re.compile(r"bearer\s+(?:[a-z0-9._~+/=-]{16,}|(?=[a-z]*[0-9._~+/=-])[a-z0-9._~+/=-]{6,})"),
    # A JWT to the end of its signature: the library's pattern ends lazily after the payload, which
    # left the signature to the entropy measure, and a random signature sometimes falls below it.
    re.compile(r"eyj[a-z0-9_=-]+\.eyj[a-z0-9_=-]+\.[a-z0-9_=+/-]+"),
)

_BASE64 = Base64HighEntropyString()
_HEX = HexHighEntropyString()
# Runs of key characters the entropy measures look at ('=' only as padding, so `name=VALUE` in
# code is two words, not one run).
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{20,}={0,2}")
_HEX_RUN = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{32,}(?![0-9A-Za-z])")

# The keyword plugin's patterns for unquoted (configuration-style) and quoted (code-style) values.
_KEYWORD_PATTERNS = {**CONFIG_DENYLIST_REGEX_TO_GROUP, **QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP}
_KEYWORD_HINT = re.compile(DENYLIST_REGEX)
# How far around a keyword on its line its value is looked for: the plugin's patterns run to the
# end of the line, which on a long line (a JSON blob) would make each keyword cost the whole line.
_KEYWORD_REACH = 256

# A credential named in a sentence: the word, an optional "for <who>", then "is"/":"/"="
# (`_STATED`), or the word and the value with only a space between (`_BARE`: "passcode 4471").
# After "is" or a space the value must look like one (see `_looks_secret`), so "the token is
# expired" and "pin the note" stay as written.
_CREDENTIAL_WORDS = (
    r"password|passphrase|passcode|passwd|pwd|pw|pin|token|api[ _-]?key|access[ _-]?key"
    r"|secret(?:[ _-]?key)?|credentials?"
)
_CREDENTIAL_HINT = re.compile(_CREDENTIAL_WORDS)
_CREDENTIAL_WORD = r"(?i)\b(?P<word>" + _CREDENTIAL_WORDS + ")"
_VALUE = r"(?P<value>\"[^\"\n]{1,200}\"|'[^'\n]{1,200}'|`[^`\n]{1,200}`|[^\s\"'`]{1,200})"
_STATED = re.compile(
    _CREDENTIAL_WORD
    + r"(?:\s+(?:for|of|to|on)(?:\s+[\w@.:/-]+){1,3}?)?"
    + r"(?P<sep>\s*[:=]\s*|\s+(?:is|was)\s*:?\s*)"
    + _VALUE
)
_BARE = re.compile(_CREDENTIAL_WORD + r"(?P<sep>\s+)" + _VALUE)
# How far after its word a spoken credential's value may end ("for <who>", "is", the value).
_SPOKEN_REACH = 320
# Words whose value after ':' or '=' is a credential whatever it looks like.
_PASSWORD_WORDS = frozenset({"password", "passphrase", "passcode", "passwd", "pwd", "pw"})
_VALUE_SYMBOLS = frozenset("!@#$%^&*+=?~_|")
_TRAILING_PUNCTUATION = ".,;:)"
# The shape detect-secrets' `is_indirect_reference` filter takes for a lookup (`get(...)`, `env[...]`).
_INDIRECT_VALUE = re.compile(r"[\w.-]+[\[(]")

# Anything any detector could start from.
_ANY_HINT = re.compile("|".join((_FORMAT_HINT.pattern, "bearer", DENYLIST_REGEX, _CREDENTIAL_WORDS)))


# Field names that say the field holds a credential, or an id (detect-secrets' `is_likely_id_string`
# heuristic: a trace, turn or response id is random and would otherwise read as a key).
_SECRET_NAME = re.compile(r"secret|token|password|passwd|api_?key|authorization|cookie", re.IGNORECASE)
_ID_NAME = re.compile(r"(?:^|[._])ids?$", re.IGNORECASE)


def names_secret(name: str) -> bool:
    """A field named like this holds a credential, whatever its value looks like."""
    return bool(_SECRET_NAME.search(name))


def names_id(name: str) -> bool:
    """A field named like this holds an id: random-looking, and not a credential."""
    return bool(_ID_NAME.search(name))


def screen(text: str) -> Screened:
    """`text` with anything that looks like a credential replaced by `[redacted]`, counted."""
    spans = find_secrets(text)
    if not spans:
        return Screened(text, 0)
    pieces: list[str] = []
    position = 0
    for span in spans:
        pieces += [text[position : span.start], REDACTED]
        position = span.end
    pieces.append(text[position:])
    return Screened("".join(pieces), len(spans))


def redact_secrets(text: str) -> str:
    """`text` with anything that looks like a credential replaced by `[redacted]`."""
    return screen(text).text


def find_secrets(text: str) -> list[Span]:
    """Where `text` holds credentials: sorted, non-overlapping spans."""
    lowered = _lowered(text)
    if not _ANY_HINT.search(lowered):
        return []
    found = [
        *_format_spans(text, lowered),
        *_keyword_spans(text, lowered),
        *_spoken_spans(text, lowered),
        *_entropy_spans(text),
    ]
    return _merged(found)


def carries_secret(text: str) -> bool:
    """True when `text` holds anything credential-like: what `find_secrets` finds, or a long
    random-looking token.

    Stricter than redaction on purpose: a learned change refused for a false positive costs
    nothing, a redacted word in a memory does. A run of 32+ key characters with letters and digits
    mixed and near-uniform characters (3 bits) is taken for a key even below the library's
    base64 limit, and a UUID-shaped one too.
    """
    if find_secrets(text):
        return True
    return any(_random_looking(m.group(0)) for m in _RANDOM_TOKEN.finditer(text))


# '/' is left out so that file paths are not taken for keys.
_RANDOM_TOKEN = re.compile(r"[A-Za-z0-9+_=-]{32,}")
_MIN_TOKEN_ENTROPY = 3.0


def _random_looking(token: str) -> bool:
    digits = sum(c.isdigit() for c in token)
    letters = sum(c.isalpha() for c in token)
    if digits < 2 or letters < 4:
        return False
    counts = Counter(token)
    entropy = -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())
    return entropy >= _MIN_TOKEN_ENTROPY


def _lowered(text: str) -> str:
    """`text` lower-cased, position for position (U+0130 is the one character whose lower case is two)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.replace("\u0130", "I").lower()


def _windows(hints: Iterable[re.Match[str]], before: int, after: int, size: int) -> list[Span]:
    """The stretches of a text within `before`/`after` characters of each hint, merged."""
    windows: list[Span] = []
    for hint in hints:
        start, end = max(0, hint.start() - before), min(size, hint.end() + after)
        if windows and start <= windows[-1].end:
            windows[-1] = Span(windows[-1].start, max(end, windows[-1].end))
        else:
            windows.append(Span(start, end))
    return windows


def _format_spans(text: str, lowered: str) -> Iterator[Span]:
    for window in _windows(_FORMAT_HINT.finditer(lowered), _FORMAT_REACH, _FORMAT_REACH, len(text)):
        for pattern in _LIBRARY_FORMATS:
            for match in pattern.finditer(text, window.start, window.end):
                if match.end() == window.end < len(text):
                    # Cut by the window (a long JWT): the whole match from where it starts.
                    match = pattern.match(text, match.start()) or match
                yield _secret_part(match)
    for pattern in _OWN_FORMATS:
        for match in pattern.finditer(lowered):
            if match.start() == 0 or not lowered[match.start() - 1].isalnum():
                yield Span(*match.span())


def _secret_part(match: re.Match[str]) -> Span:
    """The credential in a format match: from its last captured group to the end (a group is the
    secret after a prefix, as in basic auth's `://user:` or AWS's `aws_secret = `), or the whole
    match when the group is only the prefix (`ghp` of a GitHub token) or there is none; without
    the whitespace and quotes some patterns take around it."""
    start, end = match.span()
    groups = [index for index in range(1, (match.re.groups or 0) + 1) if match.group(index)]
    if groups and match.start(groups[-1]) > start:
        start = match.start(groups[-1])
    value = match.string
    while start < end and (value[start].isspace() or value[start] in "\"'=:"):
        start += 1
    while end > start and (value[end - 1].isspace() or value[end - 1] in "\"'@"):
        end -= 1
    return Span(start, end)


def _keyword_spans(text: str, lowered: str) -> Iterator[Span]:
    for keyword in _KEYWORD_HINT.finditer(lowered):
        line_start = text.rfind("\n", 0, keyword.start()) + 1
        line_end = text.find("\n", keyword.end())
        line_end = len(text) if line_end < 0 else line_end
        window_start = max(line_start, keyword.start() - _KEYWORD_REACH)
        window_end = min(line_end, keyword.end() + _KEYWORD_REACH)
        if is_indirect_reference(text[window_start:window_end]):
            continue
        for pattern, group in _KEYWORD_PATTERNS.items():
            for match in pattern.finditer(text, window_start, window_end):
                if not match.group(group):
                    continue
                start, end = match.span(group)
                quoted = start > 0 and text[start - 1] in "\"'`"
                span = Span(start, end) if quoted else _first_word(text, start, end)
                if _is_value(text[span.start : span.end]):
                    yield span


def _first_word(text: str, start: int, end: int) -> Span:
    """An unquoted value ends at the first space (the plugin's pattern runs to the end of the line)
    and without the sentence's punctuation."""
    cut = start
    while cut < end and not text[cut].isspace():
        cut += 1
    while cut > start and text[cut - 1] in _TRAILING_PUNCTUATION:
        cut -= 1
    return Span(start, cut)


def _spoken_spans(text: str, lowered: str) -> Iterator[Span]:
    for hint in _CREDENTIAL_HINT.finditer(lowered):
        reach = min(len(text), hint.start() + _SPOKEN_REACH)
        for pattern in (_STATED, _BARE):
            match = pattern.match(text, hint.start(), reach)
            span = _spoken_value(text, match) if match else None
            if span is not None:
                yield span


def _spoken_value(text: str, match: re.Match[str]) -> Span | None:
    start, end = match.span("value")
    quoted = text[start] in "\"'`"
    start, end = (start + 1, end - 1) if quoted else _first_word(text, start, end)
    value = text[start:end]
    if not _is_value(value):
        return None
    if not quoted:
        if _INDIRECT_VALUE.match(value):
            return None  # `password = os.environ["X"]`: code that reads one, not a value
        assigned = match.group("sep").strip()[:1] in {":", "="}
        if not (assigned and match.group("word").lower() in _PASSWORD_WORDS) and not _looks_secret(value, assigned):
            return None
    return Span(start, end)


def _is_value(value: str) -> bool:
    """Not a placeholder: empty, `{password}`, `$TOKEN`, or what was redacted before."""
    return (
        bool(value)
        and not value.startswith(REDACTED)
        and not is_templated_secret(value)
        and not is_prefixed_with_dollar_sign(value)
    )


def _looks_secret(value: str, assigned: bool) -> bool:
    """A value spoken after "is" (or assigned to a word like "token") that looks like a credential:
    digits, symbols or inner capitals, 4+ characters; after ':' or '=', 8+ characters also do."""
    if len(value) < 4:
        return False
    if assigned and len(value) >= 8:
        return True
    return (
        any(c.isdigit() for c in value)
        or any(c in _VALUE_SYMBOLS for c in value)
        or any(c.isupper() for c in value[1:])
    )


def _entropy_spans(text: str) -> Iterator[Span]:
    for match in _BASE64_RUN.finditer(text):
        run = match.group(0)
        if _BASE64.calculate_shannon_entropy(run) > _BASE64.entropy_limit and not is_sequential_string(run):
            yield Span(*match.span())
    for match in _HEX_RUN.finditer(text):
        run = match.group(0)
        if _is_uuid_hex(run) or is_potential_uuid(run) or is_sequential_string(run):
            continue
        if _HEX.calculate_shannon_entropy(run) > _HEX.entropy_limit:
            yield Span(*match.span())


def _is_uuid_hex(run: str) -> bool:
    """A UUID written as 32 hex digits (`uuid4().hex`): an id, not a key (a random 32-hex key has
    the version and variant digits of one only 1 time in 64)."""
    if len(run) != 32:
        return False
    value = uuid.UUID(hex=run)
    return value.version == 4 and value.variant == uuid.RFC_4122


def _merged(spans: list[Span]) -> list[Span]:
    merged: list[Span] = []
    for span in sorted(spans):
        if span.end <= span.start:
            continue
        if merged and span.start <= merged[-1].end:
            if span.end > merged[-1].end:
                merged[-1] = Span(merged[-1].start, span.end)
            continue
        merged.append(span)
    return merged
