"""Small helpers shared by the resource routers: JSON answers, validation answers, warnings."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import orjson
from fastapi import Response
from fastapi.exceptions import RequestValidationError

WARNING_HEADER = "x-popagent-warning"


class FieldViolation(Protocol):
    field: str
    message: str


def json_response(content: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    """Serialize once with orjson: FastAPI's own encoder would re-walk a shape we built already."""
    return Response(orjson.dumps(content), status_code=status_code, media_type="application/json", headers=headers)


def field_violations(violations: Iterable[FieldViolation]) -> RequestValidationError:
    """The owner's range and cross-field violations as the same 422 a malformed body gets."""
    return RequestValidationError(
        [{"loc": ("body", v.field), "msg": v.message, "type": "value_error"} for v in violations]
    )


def warned(response: Response, warning: str | None) -> None:
    if warning:
        response.headers[WARNING_HEADER] = warning
