"""The kernel's shared settings checks: typed fields, optional ones, and one field bounded by another."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from popagent_core.settings import DialAddressesOrNone, NatsUrls, PostgresUrl, PostgresUrlOrNone, check_above


class Bounded(BaseModel):
    base_s: float = 1.0
    cap_s: float = 10.0
    timeout_s: float = 10.0
    interval_s: float = 1.0
    heartbeat_s: float = 5.0

    _cap = check_above("cap_s", "base_s", "must be at least BASE", or_equal=True)
    _timeout = check_above("timeout_s", "base_s", "must exceed BASE")
    _heartbeat = check_above("heartbeat_s", "interval_s", "must exceed twice INTERVAL", factor=2)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param({"base_s": 5.0, "cap_s": 5.0, "timeout_s": 6.0}, None, id="cap-equal-to-base"),
        pytest.param({"base_s": 5.0, "cap_s": 4.0, "timeout_s": 6.0}, "must be at least BASE", id="cap-below-base"),
        pytest.param({"base_s": 5.0, "timeout_s": 5.0}, "must exceed BASE", id="timeout-equal-to-base"),
        pytest.param({"interval_s": 2.5, "heartbeat_s": 5.0}, "must exceed twice INTERVAL", id="heartbeat-twice"),
        pytest.param({"interval_s": 2.4, "heartbeat_s": 5.0}, None, id="heartbeat-over-twice"),
    ],
)
def test_a_field_is_checked_against_the_one_declared_before_it(values: dict[str, float], message: str | None) -> None:
    if message is None:
        Bounded(**values)
        return
    with pytest.raises(ValidationError) as caught:
        Bounded(**values)
    assert [error["msg"] for error in caught.value.errors()] == [f"Value error, {message}"]


def test_an_invalid_lower_field_is_not_checked_against() -> None:
    with pytest.raises(ValidationError) as caught:
        Bounded(base_s="many", cap_s=1.0)  # pyright: ignore[reportArgumentType]
    assert [error["loc"] for error in caught.value.errors()] == [("base_s",)]


class Urls(BaseModel):
    database: PostgresUrl = "postgresql://db/app"
    observability: PostgresUrlOrNone = ""
    nats: NatsUrls = "nats://a:4222"
    runner: DialAddressesOrNone = ""


def test_typed_fields_check_their_value_and_the_or_none_ones_take_empty() -> None:
    Urls(observability="", runner="")
    Urls(observability="postgres://o/x", nats="nats://a:4222, tls://b:4222", runner="10.0.0.1:1,10.0.0.2:2")
    with pytest.raises(ValidationError) as caught:
        Urls(database="", observability="mysql://o", nats="http://a", runner="a:1,b:2")
    assert [error["loc"][0] for error in caught.value.errors()] == ["database", "observability", "nats", "runner"]
