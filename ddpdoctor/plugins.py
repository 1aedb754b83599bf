"""The plugin manager: built-in detectors and exporters, and third-party plugins, all
registered through the hooks of ddpdoctor/hookspecs.py.

- Built-ins are the modules of ``DEFAULT_PLUGINS``, registered like any plugin.
- Third-party plugins are found through the setuptools entry point group "ddpdoctor".
- ``DDPDOCTOR_PLUGINS`` is an allow-list of entry point (or distribution) names, comma
  separated; ``none`` loads no third-party plugin; unset loads every installed one.
- A plugin that fails to load, or whose hook raises, never takes ddpdoctor down: the
  failure is kept in ``load_failures()`` (shown by `ddpdoctor plugins`) and reaches a
  report's "problems" through a stand-in detector that raises with the reason.
"""

from __future__ import annotations

import argparse
import importlib
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import pluggy

from ddpdoctor import hookspecs

ENTRY_POINT_GROUP = "ddpdoctor"
ENV_ALLOW = "DDPDOCTOR_PLUGINS"
DEFAULT_PLUGINS = (
    "ddpdoctor.analysis.detectors",
    "ddpdoctor.export",
)

Detector = Callable[[Any], list]
Exporter = Callable[[Any, Path], None]

pm = pluggy.PluginManager("ddpdoctor")
pm.add_hookspecs(hookspecs)


@dataclass(frozen=True)
class LoadFailure:
    """A plugin that could not be loaded (or whose hook raised): ``where`` says which step."""

    plugin: str
    where: str
    error: str


_loaded = False
_failures: list[LoadFailure] = []
_sources: dict[str, str] = {}  # plugin name -> "builtin" | "<dist> <version>"


def allowed_names() -> set[str] | None:
    """The allow-list from DDPDOCTOR_PLUGINS: None = every plugin, empty = none."""
    raw = os.environ.get(ENV_ALLOW)
    if raw is None or not raw.strip():
        return None
    names = {n.strip() for n in raw.split(",") if n.strip()}
    return set() if names <= {"none"} else names - {"none"}


def _note(plugin: str, where: str, error: BaseException) -> None:
    _failures.append(LoadFailure(plugin, where, f"{type(error).__name__}: {error}"[:500]))


def load_plugins() -> None:
    """Register the built-ins and the allowed entry-point plugins (once per process)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in DEFAULT_PLUGINS:
        try:
            mod = importlib.import_module(name)
            if pm.get_plugin(name) is None:
                pm.register(mod, name)
                _sources[name] = "builtin"
        except Exception as e:  # noqa: BLE001 - a broken built-in must not stop the rest
            _note(name, "load", e)
    allow = allowed_names()
    if allow is not None and not allow:
        return
    try:
        eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception as e:  # noqa: BLE001 - broken metadata in site-packages
        _note("entry points", "discover", e)
        return
    for ep in eps:
        dist = getattr(ep, "dist", None)
        dist_name = getattr(dist, "name", None) or ""
        if allow is not None and ep.name not in allow and dist_name not in allow:
            continue
        if pm.get_plugin(ep.name) is not None:
            continue
        try:
            pm.register(ep.load(), ep.name)
            _sources[ep.name] = f"{dist_name} {getattr(dist, 'version', '')}".strip()
        except Exception as e:  # noqa: BLE001 - a broken plugin is reported, not fatal
            _note(ep.name, "load", e)


def load_failures() -> list[LoadFailure]:
    load_plugins()
    return list(_failures)


def _collect(hook_name: str, **kwargs: Any) -> tuple[list[tuple[str, str, Any]],
                                                      list[LoadFailure]]:
    """Call every implementation of a register_* hook on its own, so that one raising
    plugin loses only its own registrations.  Returns (plugin, name, value) triples."""
    load_plugins()
    found: list[tuple[str, str, Any]] = []
    failures: list[LoadFailure] = []
    hook = getattr(pm.hook, hook_name)
    for impl in hook.get_hookimpls():  # registration order (built-ins first)
        plugin = impl.plugin_name
        mine: list[tuple[str, str, Any]] = []

        def register(name: str, value: Any, _plugin: str = plugin,
                     _mine: list = mine) -> None:
            _mine.append((_plugin, str(name), value))

        try:
            impl.function(**{k: (register if k == "register" else v)
                             for k, v in kwargs.items()})
        except Exception as e:  # noqa: BLE001 - see the module docstring
            failures.append(LoadFailure(plugin, hook_name, f"{type(e).__name__}: {e}"[:500]))
            continue
        found.extend(mine)
    return found, failures


class PluginError(RuntimeError):
    """Raised by the stand-in detector of a plugin that failed to load."""


def _failed_detector(failure: LoadFailure) -> Detector:
    def detect(job: Any) -> list:
        raise PluginError(f"plugin {failure.plugin} failed ({failure.where}): {failure.error}")

    return detect


def registered_detectors() -> list[tuple[str, Detector]]:
    """(name, detector) of every detector, built-ins first.  A plugin that failed to load
    or to register appears as a detector that raises, so analysis notes the failure in
    the report's problems and goes on."""
    found, failures = _collect("register_detectors", register=None)
    detectors: list[tuple[str, Detector]] = []
    seen: set[str] = set()
    for plugin, name, fn in found:
        key = name if name not in seen else f"{plugin}:{name}"
        seen.add(key)
        detectors.append((key, fn))
    for failure in [*_failures, *failures]:
        if failure.where not in ("load", "discover", "register_detectors"):
            continue
        detectors.append((f"plugin:{failure.plugin}", _failed_detector(failure)))
    return detectors


def registered_exporters() -> dict[str, tuple[str, Exporter]]:
    """format -> (plugin, exporter)."""
    found, failures = _collect("register_exporters", register=None)
    _failures.extend(f for f in failures if f not in _failures)
    return {name: (plugin, fn) for plugin, name, fn in found}


# -- command line --------------------------------------------------------------------------
def register_plugin_commands(subparsers: argparse._SubParsersAction) -> None:
    """The commands plugins add (their ``register_commands`` hook); failures are kept."""
    _, failures = _collect("register_commands", subparsers=subparsers)
    _failures.extend(f for f in failures if f not in _failures)


def plugin_table() -> list[dict[str, Any]]:
    """Every loaded plugin with its detectors and exporters (for `ddpdoctor plugins`)."""
    load_plugins()
    dets, _ = _collect("register_detectors", register=None)
    exps, _ = _collect("register_exporters", register=None)
    rows = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        rows.append({"name": name, "source": _sources.get(name, "registered"),
                     "detectors": [n for p, n, _ in dets if p == name],
                     "exporters": [n for p, n, _ in exps if p == name],
                     "hooks": sorted(h.name for h in pm.get_hookcallers(plugin) or [])})
    return rows
