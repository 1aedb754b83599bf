"""Framework methods that issue collectives the user never wrote (Lightning's
``trainer.save_checkpoint`` ends in a barrier, accelerate's ``save_state`` waits for every
process and gathers sharded states, DeepSpeed's engine saves and steps together, FSDP gathers
full state dicts): read from the installed framework's own source where it can be read (the
version the user has), else taken from a table that names the version it was read from.

Reading the source: the framework's module is parsed (never imported) and its method summarised
by the same analysis that reads the user's code (lint/summaries.py): the first collective it
reaches, and whether every call reaches one (a collective at the method's top level) or only
some configurations do (under a condition: a DeepSpeed or FSDP setup)."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ddpdoctor.frameworks import known
from ddpdoctor.frameworks.framework import FrameworkMethod
from ddpdoctor.lint.framework_objects import declare_class_kind
from ddpdoctor.lint.module import ParsedModule, parse_module


@dataclass(frozen=True)
class HiddenCollective:
    """What a framework method issues, and where lint learned it."""

    collective: str  # e.g. "strategy.barrier"
    always: bool
    source: str  # "lightning 2.6.6 (installed)" or "deepspeed 0.19.0 (table)"


# the frameworks' records (ddpdoctor/frameworks/): read when the installed source is not
TABLE: tuple[FrameworkMethod, ...] = known.hidden_methods()
# kinds of framework object (lint/framework_objects.py), and the frameworks each may be
KIND_FRAMEWORKS: dict[str, tuple[str, ...]] = known.hidden_frameworks()
_READ: dict[tuple[str, str, str], HiddenCollective | None] = {}


def installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return None


def _module_file(dotted: str) -> Path | None:
    """The installed file of a framework module, found without importing anything."""
    top = dotted.split(".", 1)[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    base = Path(spec.origin).parent
    rest = dotted.split(".")[1:]
    for cand in (base.joinpath(*rest).with_suffix(".py"), base.joinpath(*rest, "__init__.py")):
        if cand.is_file():
            return cand
    return None


def _absolute_imports(module: ParsedModule, dotted: str, is_package: bool) -> None:
    """Relative imports of a framework module made absolute (``from .utils import x`` in
    ``accelerate.accelerator`` -> ``accelerate.utils.x``)."""
    package = dotted if is_package else dotted.rsplit(".", 1)[0]
    for node in module.nodes():
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            parts = package.split(".")
            base = parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts
            prefix = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                module.aliases[a.asname or a.name] = f"{prefix}.{a.name}"


def read_installed(entry: FrameworkMethod) -> HiddenCollective | None:
    """What the installed framework's method issues, read from its source; None when the
    framework, its module or the method cannot be found (then the table speaks)."""
    key = (entry.module, entry.cls, entry.method)
    if key in _READ:
        return _READ[key]
    found: HiddenCollective | None = None
    _READ[key] = None  # a method that reaches itself through the framework's others
    file = _module_file(entry.module)
    version = installed_version(entry.package)
    if file is not None and version is not None:
        try:
            module = parse_module(file, str(file))
        except Exception:  # noqa: BLE001 - an unreadable framework file: the table speaks
            module = None
        if module is not None:
            _absolute_imports(module, entry.module, file.name == "__init__.py")
            declare_class_kind(module, entry.cls, known.object_kind(f"{entry.package}.{entry.cls}"))
            found = _summarise(module, entry, version)
    _READ[key] = found
    return found


# how a framework's method is summarised: (module, "Class.method") -> (the first collective it
# reaches, or "" for none; whether every call reaches one), or None when it is not there. Set
# by lint/summaries.py, whose analysis reads the framework's source as it reads the user's.
MethodSummariser = Callable[[ParsedModule, str], "tuple[str, bool] | None"]
summarise_method: MethodSummariser | None = None


def _summarise(module: ParsedModule, entry: FrameworkMethod, version: str) \
        -> HiddenCollective | None:
    if summarise_method is None:
        return None
    found = summarise_method(module, f"{entry.cls}.{entry.method}")
    if found is None:
        return None
    return HiddenCollective(found[0], found[1], f"{entry.package} {version}, installed")


def hidden_collective(receiver: frozenset[str], method: str, imports: set[str]) \
        -> HiddenCollective | None:
    """The collective a call ``<receiver>.<method>(...)`` issues when the receiver is one of the
    frameworks' objects (``receiver``: its kinds, by what built it), in a file importing that
    framework: read from the installed source, else from the table (with its version)."""
    for kind in receiver:
        packages = KIND_FRAMEWORKS.get(kind)
        if packages is None:
            continue
        for entry in TABLE:
            if entry.method != method or entry.package not in packages or \
                    entry.package.split(".")[0] not in imports:
                continue
            read = read_installed(entry)
            if read is not None:
                return read if read.collective else None
            return HiddenCollective(entry.collective, entry.always,
                                    f"{entry.package} {entry.version}, from lint's table")
    return None
