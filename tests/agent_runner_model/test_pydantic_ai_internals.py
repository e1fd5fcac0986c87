"""The private pydantic-ai names the lean model depends on still exist, each imported from pydantic-ai itself.

`popagent_agent_runner.llm.pydantic_ai_internals` is the one module that imports them; after a
pydantic-ai upgrade this test says which name went away, instead of an `ImportError` at service
start or an override that silently stopped being called.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

import pytest
from pydantic_ai.models import Model, StreamedResponse

from popagent_agent_runner.llm import pydantic_ai_internals

REPO = Path(__file__).resolve().parents[2]
INTERNALS = Path(pydantic_ai_internals.__file__)

# Every private name the internals module imports, by the pydantic-ai module it comes from.
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "pydantic_ai": ("_model_errors",),
    "pydantic_ai._file_input": ("KNOWN_DOCUMENT_MEDIA_TYPES", "TEXT_DOCUMENT_MEDIA_TYPES", "FileInputKind"),
    "pydantic_ai._json_schema": ("JsonSchemaTransformer",),
    "pydantic_ai._output": ("DEFAULT_OUTPUT_TOOL_NAME",),
    "pydantic_ai._special_tokens": ("_StreamedTextRestorer",),
    "pydantic_ai._thinking_part": ("render_replayed_thinking", "split_content_into_text_and_thinking"),
    "pydantic_ai._utils": ("guard_tool_call_id", "is_text_like_media_type", "now_utc", "number_to_datetime"),
    "pydantic_ai.models": ("_customize_tool_def", "_sendable_request_parts"),
    "pydantic_ai.models._tool_choice": (
        "resolve_tool_choice",
        "support_tool_forcing",
        "tool_forcing_unavailable_reason",
    ),
    "pydantic_ai.profiles._family": ("vendor_family_model_profile",),
    "pydantic_ai.profiles._special_tokens": ("special_token_route_profile",),
}
# The reference implementations `test_model_wire.py` checks the lean mappings against (they live in
# pydantic-ai's openai package, which the service itself never imports).
REFERENCE_NAMES: dict[str, tuple[str, ...]] = {
    "pydantic_ai.models.openai._reasoning": ("resolve_openai_thinking_effort",),
    "pydantic_ai.models.openai._response_fields": ("map_usage",),
}


def _missing(names: dict[str, tuple[str, ...]]) -> list[str]:
    missing: list[str] = []
    for module_name, attributes in names.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            missing.append(f"module {module_name}")
            continue
        missing.extend(f"{module_name}.{name}" for name in attributes if not hasattr(module, name))
    return missing


@pytest.mark.parametrize("names", [PRIVATE_NAMES, REFERENCE_NAMES], ids=["lean model", "agreement references"])
def test_every_private_name_still_exists(names: dict[str, tuple[str, ...]]) -> None:
    missing = _missing(names)
    assert not missing, f"pydantic-ai no longer has: {', '.join(missing)} (update llm/pydantic_ai_internals.py)"


def test_the_private_model_errors_functions_exist() -> None:
    from pydantic_ai import _model_errors  # pyright: ignore[reportPrivateUsage]

    missing = [name for name in pydantic_ai_internals.MODEL_ERRORS_USED if not hasattr(_model_errors, name)]
    assert not missing, f"pydantic_ai._model_errors no longer has: {', '.join(missing)}"


def _has_member(cls: type, name: str) -> bool:
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set[str]()
    return hasattr(cls, name) or name in fields


@pytest.mark.parametrize(
    ("cls", "members"),
    [
        (Model, pydantic_ai_internals.MODEL_MEMBERS),
        (StreamedResponse, pydantic_ai_internals.STREAMED_RESPONSE_MEMBERS),
    ],
    ids=["Model", "StreamedResponse"],
)
def test_the_private_members_the_lean_model_overrides_still_exist(cls: type, members: tuple[str, ...]) -> None:
    missing = [name for name in members if not _has_member(cls, name)]
    assert not missing, f"pydantic_ai.models.{cls.__name__} no longer has: {', '.join(missing)}"


def _private_imports(path: Path) -> list[str]:
    """`module.name` for every private pydantic-ai module or name `path` imports."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pydantic_ai":
            private_module = any(part.startswith("_") for part in node.module.split("."))
            found.extend(
                f"{node.module}.{alias.name}" for alias in node.names if private_module or alias.name.startswith("_")
            )
        elif isinstance(node, ast.Import):
            found.extend(
                alias.name
                for alias in node.names
                if alias.name.split(".")[0] == "pydantic_ai" and any(p.startswith("_") for p in alias.name.split("."))
            )
    return found


def test_the_internals_module_imports_exactly_the_names_checked_here() -> None:
    checked = {f"{module}.{name}" for module, names in PRIVATE_NAMES.items() for name in names}
    assert set(_private_imports(INTERNALS)) == checked


def test_nothing_else_imports_a_private_pydantic_ai_name() -> None:
    references = {f"{module}.{name}" for module, names in REFERENCE_NAMES.items() for name in names}
    allowed = {INTERNALS.resolve(), Path(__file__).resolve()}
    offenders = {
        str(path.relative_to(REPO)): names
        for root in ("services", "libs", "bench", "tests")
        for path in (REPO / root).rglob("*.py")
        if "node_modules" not in path.parts and path.resolve() not in allowed
        if (names := [name for name in _private_imports(path) if name not in references])
    }
    assert not offenders, f"import these through popagent_agent_runner.llm.pydantic_ai_internals: {offenders}"
