"""Wire DTOs: the request and response shapes of the HTTP API, camelCase on the wire.

Defined once here, one module per resource (`dto/<area>.py`), and exported as the OpenAPI
document the UI is typed from (`python -m popagent_gateway.openapi`). Request bodies are
strict and closed: unknown fields, wrong JSON types and out-of-range values are refused with
422 naming the field.

One convention, so a schema name says what it is: Python fields are snake_case and go on
the wire camelCase (the alias generator), and names are
- `<Thing>Out` / `<Thing>ListOut` for answers (`WireModel`),
- `<Thing><Change>` for request bodies (`WireInput`): `SessionCreate`, `TaskResolve`,
  `SecretProvision`; a partial update is `<Thing>Patch` (`PatchModel`),
- `<Thing>ListQuery` / `<Thing>Query` for query-parameter models.
Routes import their shapes from here and define none of their own.
"""

from __future__ import annotations

import types
from typing import Any, ClassVar, Union, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    ModelWrapValidatorHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """A response shape. Built in Python by field name, serialized by alias (camelCase)."""

    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, serialize_by_alias=True)


def _closed_schema(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    # Optional-but-not-nullable PATCH fields default to None only as "absent"; that
    # default is not a value a client may send, so it stays out of the document.
    for prop in schema.get("properties", {}).values():
        if prop.get("default", ...) is None:
            del prop["default"]
    if issubclass(cls, PatchModel):
        schema["minProperties"] = 1


class WireInput(BaseModel):
    """A request body: camelCase only, strict JSON types, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
        extra="forbid",
        strict=True,
        json_schema_extra=_closed_schema,
    )

    # An optional field is absent or a value; null is accepted only for fields listed here
    # (null then means "clear"), and only those show null in the document.
    NULLABLE: ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="before")
    @classmethod
    def _not_null(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None and info.field_name not in cls.NULLABLE:
            raise ValueError("must not be null")
        return value

    @model_validator(mode="wrap")
    @classmethod
    def _plain_field_errors(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        """Report an optional field's error under the field's own name.

        An optional field is a union with None, so pydantic reports one error per union
        member (`["body", "taskConcurrency", "constrained-int"]` and `[..., "none"]`).
        The client sent a value, not null (null is refused before), so only the value's
        own error is kept, at `["body", "taskConcurrency"]`.
        """
        try:
            return handler(data)
        except ValidationError as exc:
            optional = _optional_aliases(cls)
            errors: list[Any] = []
            for error in exc.errors():
                loc = error["loc"]
                if len(loc) >= 2 and loc[0] in optional:
                    if loc[1] == "none":
                        continue
                    loc = (loc[0], *loc[2:])
                errors.append({"type": error["type"], "loc": loc, "input": error["input"], "ctx": error.get("ctx", {})})
            raise ValidationError.from_exception_data(exc.title, errors) from None


def _optional_aliases(model: type[BaseModel]) -> frozenset[str]:
    aliases = set()
    for name, info in model.model_fields.items():
        annotation = info.annotation
        # Every union in a request body is "value or absent" (None, possibly schema-hidden).
        if get_origin(annotation) in (Union, types.UnionType):
            aliases.add(info.alias or name)
    return frozenset(aliases)


class PatchModel(WireInput):
    """A partial update: only the fields sent change; at least one is required."""

    @model_validator(mode="after")
    def _not_empty(self) -> PatchModel:
        if not self.model_fields_set:
            raise ValueError("at least one field is required")
        return self

    def changes(self) -> dict[str, Any]:
        """Field name -> value of exactly the fields the client sent."""
        return {name: getattr(self, name) for name in self.model_fields_set}


class ErrorOut(BaseModel):
    """Every error answer: a reason, and for validation failures the fields at fault."""

    error: str
    details: list[dict[str, Any]] | None = None
