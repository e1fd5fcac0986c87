"""Stored model messages are parsed once per process and never served stale or shared mutably."""

from __future__ import annotations

from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, ModelResponse, TextPart, UserPromptPart

from popagent_agent_runner.memory.observational.store import ParsedMessages


def _stored(text: str) -> str:
    messages = [ModelRequest(parts=[UserPromptPart(text)]), ModelResponse(parts=[TextPart(f"re: {text}")])]
    return ModelMessagesTypeAdapter.dump_json(messages).decode()


def test_a_second_read_reuses_the_parsed_parts_in_fresh_messages() -> None:
    cache = ParsedMessages(max_chars=100_000)
    stored = _stored("hello")
    first = cache.parse(stored)
    second = cache.parse(stored)
    assert first == second == ModelMessagesTypeAdapter.validate_json(stored)
    # Not parsed again: the parts are the very objects the first read built...
    assert all(a.parts is b.parts for a, b in zip(first, second, strict=True))
    # ...but each read has its own messages, so metadata pydantic-ai stamps on one run's history
    # (run_id, timestamp) never reaches the next reader.
    assert all(a is not b for a, b in zip(first, second, strict=True))
    first[0].run_id = "run-of-the-first-reader"
    assert cache.parse(stored)[0].run_id is None


def test_changed_content_is_parsed_again() -> None:
    cache = ParsedMessages(max_chars=100_000)
    before = cache.parse(_stored("the first text"))
    after = cache.parse(_stored("an edited text"))
    assert after[0].parts[0].content == "an edited text"  # type: ignore[union-attr]
    assert before[0].parts is not after[0].parts


def test_the_cache_is_bounded_by_the_characters_it_holds() -> None:
    one = _stored("x" * 100)
    cache = ParsedMessages(max_chars=len(one) * 3)
    for index in range(10):
        cache.parse(_stored(f"{index}" + "x" * 99))
    assert len(cache) == 3
    oversized = ParsedMessages(max_chars=10)
    assert oversized.parse(one) == ModelMessagesTypeAdapter.validate_json(one)
    assert len(oversized) == 0  # larger than the whole cache: parsed, not kept
