"""The model catalog answer as every process reads it (popagent_core.model_catalog)."""

from __future__ import annotations

import orjson
import pytest

from popagent_core.model_catalog import MAX_CATALOG_BYTES, catalog_entries, context_window


def test_entries_are_the_objects_with_a_string_id_in_order() -> None:
    raw = orjson.dumps(
        {"data": [{"id": "a/one"}, "junk", {"no": "id"}, {"id": 7}, {"id": "a/two", "context_length": 5}]}
    )
    assert catalog_entries(raw) == [{"id": "a/one"}, {"id": "a/two", "context_length": 5}]


def test_a_limit_counts_every_data_item_not_only_the_kept_ones() -> None:
    raw = orjson.dumps({"data": ["junk", {"id": "a/one"}, {"id": "a/two"}]})
    assert catalog_entries(raw, limit=2) == [{"id": "a/one"}]


@pytest.mark.parametrize(
    "raw",
    [b'{"models": []}', b"[]", b'{"data": {}}', b"not json", b" " * (MAX_CATALOG_BYTES + 1)],
    ids=["no-data", "not-an-object", "data-not-a-list", "not-json", "too-large"],
)
def test_an_answer_that_is_not_a_model_list_is_a_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        catalog_entries(raw)


def test_the_context_window_is_context_length_else_the_capability_else_none() -> None:
    assert context_window({"id": "m", "context_length": 1000, "capabilities": {"contextWindow": 2000}}) == 1000
    assert context_window({"id": "m", "capabilities": {"contextWindow": 3000}}) == 3000
    assert context_window({"id": "m", "context_length": "big", "capabilities": {"contextWindow": -1}}) is None
    assert context_window({"id": "m", "context_length": True}) is None
    assert context_window({"id": "m", "capabilities": "wide"}) is None
