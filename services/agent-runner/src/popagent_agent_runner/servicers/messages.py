"""A typed record as the proto message a servicer answers with, built by field name."""

from __future__ import annotations

import datetime as dt
from typing import Any, TypeVar

from google.protobuf.message import Message

MessageT = TypeVar("MessageT", bound=Message)


def message_of(message_type: type[MessageT], record: object, **given: Any) -> MessageT:
    """`message_type` with each field taken from `record`'s attribute of the same name: a datetime as
    ISO 8601 text, None left at the field's default, an attribute the record lacks left out. `given`
    sets the fields whose value is named or built otherwise."""
    values: dict[str, Any] = {}
    for name in message_type.DESCRIPTOR.fields_by_name:
        if name in given:
            continue
        value = getattr(record, name, None)
        if value is None:
            continue
        values[name] = value.isoformat() if isinstance(value, dt.datetime) else value
    return message_type(**values, **given)
