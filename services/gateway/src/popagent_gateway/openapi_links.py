"""What the served OpenAPI document adds to FastAPI's: links (what a created resource leads to,
so clients and stateful testing, Schemathesis' stateful phase, follow them instead of guessing
ids), and the bounds `json_bounds` puts on every request body, declared where the body's
schema is: no string holds a NUL character (PostgreSQL text cannot), and free-form JSON (the
AI SDK's part fields and metadata, open on purpose) is `JsonValue`: integers within 64 bits,
no NUL in a string or a key. (Its nesting bound, 64 levels, is not said: a recursive schema
cannot count.)"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from popagent_gateway.json_bounds import MAX_INT, MIN_INT

SESSION_ID = "$response.body#/id"

# (from: method, path, status) -> {link name: (method, path, parameters, request body)}
LINKS: dict[tuple[str, str, str], dict[str, tuple[str, str, dict[str, str], Any]]] = {
    ("post", "/api/sessions", "201"): {
        "GetSession": ("get", "/api/sessions/{session_id}", {"session_id": SESSION_ID}, None),
        "SaveSession": ("put", "/api/sessions/{session_id}", {"session_id": SESSION_ID}, None),
        "UpdateSession": ("patch", "/api/sessions/{session_id}", {"session_id": SESSION_ID}, None),
        "SessionHookRuns": ("get", "/api/sessions/{session_id}/hooks", {"session_id": SESSION_ID}, None),
        "DeleteSession": ("delete", "/api/sessions/{session_id}", {"session_id": SESSION_ID}, None),
        "Chat": ("post", "/api/chat", {}, {"id": SESSION_ID}),
    },
}


def add_links(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with LINKS set on the responses they start from (by operationId)."""
    paths = document.get("paths", {})
    for (method, path, status), links in LINKS.items():
        response = paths[path][method]["responses"][status]
        built: dict[str, Any] = {}
        for name, (target_method, target_path, parameters, body) in links.items():
            link: dict[str, Any] = {"operationId": paths[target_path][target_method]["operationId"]}
            if parameters:
                link["parameters"] = parameters
            if body is not None:
                link["requestBody"] = body
            built[name] = link
        response["links"] = built
    return document


# A string of a body must not match this (`not`): JSON Schema has one pattern per schema, and
# many strings have theirs already.
NO_NUL: dict[str, Any] = {"pattern": "\\x00"}


def _body_schemas(document: dict[str, Any]) -> list[Any]:
    """Every request body's schema, and the components they reach (by $ref), each once."""
    components = document.get("components", {}).get("schemas", {})
    inline: list[Any] = [
        media.get("schema")
        for item in document.get("paths", {}).values()
        for operation in item.values()
        if isinstance(operation, dict)
        for media in operation.get("requestBody", {}).get("content", {}).values()
    ]
    reached: dict[str, Any] = {}
    stack = list(inline)
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                name = ref.rsplit("/", 1)[-1]
                if name not in reached and name in components:
                    reached[name] = components[name]
                    stack.append(components[name])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return inline + list(reached.values())


JSON_VALUE_REF = "#/components/schemas/JsonValue"
# Keywords that do not constrain a value: a schema of only these is free-form JSON.
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "deprecated"})
JSON_VALUE: dict[str, Any] = {
    "description": "any JSON the services can store: integers within 64 bits, no NUL in a string or a key",
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "integer", "minimum": MIN_INT, "maximum": MAX_INT},
        {"type": "number", "not": {"type": "integer"}},
        {"type": "string", "not": NO_NUL},
        {"type": "array", "items": {"$ref": JSON_VALUE_REF}},
        {
            "type": "object",
            "propertyNames": {"not": NO_NUL},
            "additionalProperties": {"$ref": JSON_VALUE_REF},
        },
    ],
}


def _free_form(node: Any) -> bool:
    return isinstance(node, dict) and set(node) <= _ANNOTATIONS


def _declare_json_values(schema: Any) -> None:
    """Free-form values and open objects of `schema` become JsonValue (in place)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            for index, item in enumerate(node):
                if _free_form(item):
                    node[index] = {**item, "$ref": JSON_VALUE_REF}
                else:
                    stack.append(item)
            continue
        if not isinstance(node, dict):
            continue
        if node.get("additionalProperties") is True:
            node["additionalProperties"] = {"$ref": JSON_VALUE_REF}
        for key, value in node.items():
            if key in ("properties", "$defs", "patternProperties") and isinstance(value, dict):
                for name, member in value.items():
                    if _free_form(member):
                        value[name] = {**member, "$ref": JSON_VALUE_REF}
                    else:
                        stack.append(member)
            elif key in ("items", "additionalProperties", "not") and _free_form(value):
                node[key] = {**value, "$ref": JSON_VALUE_REF}
            else:
                stack.append(value)


def _declare_no_nul(schema: Any) -> None:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        types = node.get("type")
        if (types == "string" or (isinstance(types, list) and "string" in types)) and "not" not in node:
            node["not"] = NO_NUL
        # A map's keys are strings of the body too.
        if types == "object" and node.get("additionalProperties", True) is not False and "propertyNames" not in node:
            node["propertyNames"] = {"not": NO_NUL}
        for key, value in node.items():
            # A `not` says what a value must not be: a rule inside it would be turned around.
            if key != "not":
                stack.append(value)


def add_body_rules(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with json_bounds' rules on every request body schema."""
    bodies = _body_schemas(document)
    for schema in bodies:
        _declare_no_nul(schema)
        _declare_json_values(schema)
    document.setdefault("components", {}).setdefault("schemas", {})["JsonValue"] = JSON_VALUE
    return document


def install_links(app: FastAPI) -> None:
    """Serve the app's OpenAPI document with LINKS and the body rules (built once, as FastAPI
    caches its own)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = add_body_rules(add_links(build()))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
