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

import functools
import types
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin

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

# A relative path in a workspace, as agent-runner stores it (`normalize_relative_path`):
# components apart by slashes, none `..`, without control characters or backslashes.
# A component is at most 255 bytes of UTF-8 on disk; a pattern counts characters, so it says
# "up to 63 characters of any kind (at most 252 bytes), or 64 to 255 printable ASCII ones".
# Narrower than agent-runner's own check on purpose, so what the document declares is exactly
# what the gateway lets through.
_PATH_CHAR = r"[^/\\\x00-\x1f\x7f-\x9f]"
_PATH_CHAR_NOT_DOT = r"[^./\\\x00-\x1f\x7f-\x9f]"
_PATH_SEGMENT = (
    rf"(?:{_PATH_CHAR_NOT_DOT}{_PATH_CHAR}{{0,62}}|\.{_PATH_CHAR_NOT_DOT}{_PATH_CHAR}{{0,61}}"
    rf"|\.\.{_PATH_CHAR}{{1,61}}|[\x20-\x2e\x30-\x5b\x5d-\x7e]{{64,255}})"
)
# `.` components and repeated or trailing slashes are allowed (agent-runner drops them), as
# long as one component names something.
RELATIVE_PATH_PATTERN = rf"^(?:\./+)*{_PATH_SEGMENT}(?:/+(?:{_PATH_SEGMENT}|\.))*/*$"
RELATIVE_PATH_DESCRIPTION = (
    "relative (no leading '/'), no '..' component, no control characters or backslashes; '.' components and "
    "repeated slashes are dropped; a component is up to 63 characters, or up to 255 when all printable ASCII"
)
# Python's whitespace, which is what the services strip.
_BLANK = r"\t\n\v\f\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# Text that is not only whitespace (nor holds a NUL, as every body string), said as what it must
# not be: as a `pattern` beside a long maxLength it leaves Schemathesis' coverage phase unable
# to draw any valid body.
NOT_BLANK_SCHEMA: dict[str, Any] = {"not": {"anyOf": [{"pattern": "\\x00"}, {"pattern": f"^[{_BLANK}]*$"}]}}
# A name: no control characters, and not only whitespace (agent-runner strips it).
# An http(s) URL of printable ASCII, no spaces, "/", "?" or "#" in its host part. Spelled as ASCII
# classes, not \s / \S: JSON Schema's (ECMA) and pydantic's (Rust) regexes disagree on which Unicode
# characters are space (U+0085), so a schema-valid URL could be refused.
URL_PATTERN = r'^https?://[!"$-.0->@-~]+(/[!-~]*)?$'
NAME_PATTERN = rf"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x1f\x7f-\x9f{_BLANK}][^\x00-\x1f\x7f-\x9f]*$"


class WireModel(BaseModel):
    """A response shape. Built in Python by field name, serialized by alias (camelCase)."""

    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, serialize_by_alias=True)


def _closed_schema(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    nullable = {info.alias or name for name, info in cls.model_fields.items() if name in _nullable(cls)}
    for alias, prop in schema.get("properties", {}).items():
        # Optional-but-not-nullable PATCH fields default to None only as "absent"; that
        # default is not a value a client may send, so it stays out of the document.
        if prop.get("default", ...) is None:
            del prop["default"]
        # And null itself is refused (`_not_null`) unless the field is NULLABLE.
        if alias not in nullable and "anyOf" in prop:
            kept = [member for member in prop["anyOf"] if member != {"type": "null"}]
            if len(kept) == 1:
                del prop["anyOf"]
                prop.update(kept[0])
            else:
                prop["anyOf"] = kept
    if issubclass(cls, PatchModel):
        schema["minProperties"] = 1
    # Rules across fields, in JSON Schema, where a model's validators enforce them.
    schema.update(getattr(cls, "SCHEMA_RULES", {}))


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
    # JSON Schema keywords added to the model's schema: the cross-field rules its validators check.
    SCHEMA_RULES: ClassVar[dict[str, Any]] = {}

    @field_validator("*", mode="before")
    @classmethod
    def _not_null(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None and info.field_name not in cls.NULLABLE:
            raise ValueError("must not be null")
        # JSON has one number type: `3.0` is the integer 3 (JSON Schema's `integer` says so
        # too), which strict mode alone would refuse. Other floats stay refused.
        if isinstance(value, float) and value.is_integer() and info.field_name in _int_fields(cls):
            return int(value)
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


def _nullable(model: type[BaseModel]) -> frozenset[str]:
    return getattr(model, "NULLABLE", frozenset())


def _bare(annotation: Any) -> list[Any]:
    """The types of a field's annotation without None and Annotated metadata."""
    members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    bare = [get_args(member)[0] if get_origin(member) is Annotated else member for member in members]
    return [member for member in bare if member is not type(None)]


@functools.cache
def _int_fields(model: type[BaseModel]) -> frozenset[str]:
    """Fields whose value is an integer (bool, a subclass, is not one on the wire)."""
    return frozenset(name for name, info in model.model_fields.items() if _bare(info.annotation) == [int])


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
