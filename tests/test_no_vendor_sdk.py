"""No vendor model SDK in application code.

Every model is reached through the OpenAI-compatible HTTP API: agent-runner's lean client
(`llm/`) and evolution's reflection agent through pydantic-ai, so the provider stays
swappable. pydantic-ai itself imports the `openai` SDK (its `[openai]` extra, the only vendor
SDK among the dependencies); application code under services/ and libs/ must not, nor any
other vendor's SDK. Checked on the source: every import statement (inside functions and
`TYPE_CHECKING` blocks too) and every `importlib.import_module` / `__import__` of a literal name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Generated gRPC code is not written by hand and imports only protobuf and grpc.
GENERATED = ROOT / "libs" / "popagent-protos"

# Top-level modules (or dotted prefixes) of model vendors' SDKs.
VENDOR_SDKS = (
    "openai",
    "anthropic",
    "google.genai",
    "google.generativeai",
    "google.ai.generativelanguage",
    "vertexai",
    "mistralai",
    "groq",
    "cohere",
    "huggingface_hub",
    "ollama",
    "litellm",
    "boto3",
    "botocore",
)


def application_sources() -> Iterator[Path]:
    for top in ("services", "libs"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = set(path.relative_to(ROOT).parts)
            if path.is_relative_to(GENERATED) or {"node_modules", ".venv", "__pycache__"} & parts:
                continue
            yield path


def _imported_names(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            # `from google import genai` imports google.genai.
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in {"import_module", "__import__"} and isinstance(node.args[0].value, str):
                yield node.lineno, node.args[0].value


def _is_vendor_sdk(module: str) -> bool:
    return any(module == sdk or module.startswith(f"{sdk}.") for sdk in VENDOR_SDKS)


def vendor_imports(path: Path) -> list[str]:
    """`path:line imports <module>` for every vendor SDK `path` imports."""
    tree = ast.parse(path.read_text(), str(path))
    # One finding per statement: `from anthropic import Anthropic` names the SDK twice.
    found: dict[int, str] = {}
    for line, module in _imported_names(tree):
        if _is_vendor_sdk(module) and line not in found:
            found[line] = module
    return [f"{path}:{line} imports {module}" for line, module in sorted(found.items())]


def test_application_code_imports_no_vendor_model_sdk() -> None:
    found = [line for path in application_sources() for line in vendor_imports(path)]
    assert found == [], "reach models through the OpenAI-compatible HTTP API, not a vendor SDK:\n" + "\n".join(found)


def test_the_check_sees_the_application_code() -> None:
    # A check that walks no file passes whatever the code imports.
    sources = {path.relative_to(ROOT).as_posix() for path in application_sources()}
    assert "services/agent-runner/src/popagent_agent_runner/llm/model.py" in sources
    assert "services/evolution/src/popagent_evolution/reflection.py" in sources
    assert not any(source.startswith("libs/popagent-protos/") for source in sources)


def test_the_check_catches_every_form_of_import(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text(
        "import openai\n"
        "from anthropic import Anthropic\n"
        "from google import genai\n"
        "import importlib\n"
        "def later():\n"
        "    import mistralai.client\n"
        "    return importlib.import_module('groq')\n"
        # Not SDKs: pydantic-ai's own provider modules, tokenizers, an unrelated google package.
        "from pydantic_ai.models.openai import OpenAIChatModel\n"
        "import tiktoken\n"
        "import google.protobuf\n"
        "import openai_like_name\n"
    )
    assert [line.split(" imports ")[1] for line in vendor_imports(module)] == [
        "openai",
        "anthropic",
        "google.genai",
        "mistralai.client",
        "groq",
    ]
