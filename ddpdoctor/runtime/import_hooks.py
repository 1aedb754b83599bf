"""Run a callback right after a module is imported, without importing it ourselves."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any, Callable


class AfterImport(importlib.abc.MetaPathFinder):
    """A one-shot finder: when ``name`` is imported, its loader runs ``callback(module)``
    once the module has executed.  Removes itself on first use."""

    def __init__(self, name: str, callback: Callable[[Any], None]):
        self.name = name
        self.callback = callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original_exec = spec.loader.exec_module
        callback = self.callback

        def exec_module(module: Any) -> None:
            original_exec(module)
            callback(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def after_import(name: str, callback: Callable[[Any], None]) -> None:
    """``callback(module)`` now if ``name`` is imported already, else right after it is."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    sys.meta_path.insert(0, AfterImport(name, callback))
