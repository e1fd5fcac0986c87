"""popagent_core.db.record_of: a row as its typed record."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, cast

import asyncpg
import pytest

from popagent_core.db import record_of


class Color(enum.Enum):
    RED = "red"


@dataclass(frozen=True, slots=True)
class Paint:
    id: str
    color: Color
    litres: float


def test_each_field_comes_from_its_column_and_converted_ones_from_the_caller() -> None:
    row = cast(asyncpg.Record, {"id": 7, "color": "red", "litres": 2.5, "extra": "ignored"})
    assert record_of(Paint, row, id="7", color=Color("red")) == Paint(id="7", color=Color.RED, litres=2.5)


def test_a_missing_column_is_an_error_not_a_default() -> None:
    row: Any = {"id": "7", "color": "red"}
    with pytest.raises(KeyError):
        record_of(Paint, row, color=Color.RED)
