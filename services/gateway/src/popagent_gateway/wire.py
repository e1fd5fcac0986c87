"""Small helpers shared by the resource routers: JSON answers, answers from service messages, validation
answers, warnings."""

from __future__ import annotations

import functools
import types
from collections.abc import Iterable
from typing import Any, Protocol, TypeVar, get_args

import orjson
from fastapi import Response
from fastapi.exceptions import RequestValidationError
from google.protobuf.message import Message
from pydantic import BaseModel

WARNING_HEADER = "x-popagent-warning"


Out = TypeVar("Out", bound=BaseModel)


class FieldViolation(Protocol):
    field: str
    message: str


def json_response(content: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    """Serialize once with orjson: FastAPI's own encoder would re-walk a shape we built already."""
    return Response(orjson.dumps(content), status_code=status_code, media_type="application/json", headers=headers)


@functools.cache
def _nullable_fields(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(name for name, field in model.model_fields.items() if types.NoneType in get_args(field.annotation))


def from_message(model: type[Out], message: Message) -> Out:
    """A response shape from a service's message: each field from the message field of its name (a nested
    message or a repeated one read the same way), and an empty string as null where the shape takes null,
    since a proto3 string has no null."""
    nullable = _nullable_fields(model)
    values: dict[str, Any] = {}
    for name in model.model_fields:
        value = getattr(message, name)
        values[name] = None if name in nullable and value == "" else value
    return model.model_validate(values, from_attributes=True)


def field_violations(violations: Iterable[FieldViolation]) -> RequestValidationError:
    """The owner's range and cross-field violations as the same 422 a malformed body gets."""
    return RequestValidationError(
        [{"loc": ("body", v.field), "msg": v.message, "type": "value_error"} for v in violations]
    )


def warned(response: Response, warning: str | None) -> None:
    if warning:
        response.headers[WARNING_HEADER] = warning
