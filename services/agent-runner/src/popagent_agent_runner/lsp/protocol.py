"""lsprotocol's `types`, loaded when first used (importlib's documented LazyLoader recipe).

The module is large (about 1.3 s to import and 16 MB resident), and an agent-runner worker needs it
only once a turn inspects code with a language server; every worker used to load it at start.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def _lazy(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.loader is not None
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


types = _lazy("lsprotocol.types")
