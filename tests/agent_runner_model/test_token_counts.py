"""Token counts are o200k's: tiktoken's BPE on bpe-openai's ranks file gives the ids bpe-openai's own
encoder gives (which agent-runner no longer loads: it costs twice the memory), on every kind of text."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

from popagent_agent_runner.memory.observational import tokens

REPO = Path(__file__).resolve().parents[2]


def test_counts_match_bpe_openai_on_varied_text() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import bpe_openai

        reference = bpe_openai.get_encoding("o200k_base")
    rng = random.Random(20261201)
    texts = [
        "hello world",
        " ",
        "\n\n  indented\r\n\ttabs",
        "日本語のテキストです。中文文本。한국어 텍스트",
        "emoji 😀🎉👩‍👩‍👧 and math ∑∫√",
        "'s 're CamelCaseWords HTTPServer don't I'LL",
        "numbers 1 12 123 1234 12345 3.14159 -42",
        "a lone surrogate \ud800 in text",
        (REPO / "README.md").read_text(),
        Path(tokens.__file__).read_text(),
        *("".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(1, 300))) for _ in range(300)),
    ]
    for text in texts:
        assert tokens.count_text(text) == len(reference.encode_ordinary(text)), text[:80]
