"""The hooks a ddpdoctor plugin can implement (pluggy project "ddpdoctor").

A plugin is a module (or object) with functions marked ``@hookimpl``
(``from ddpdoctor.hookspecs import hookimpl``), found through the setuptools entry point group "ddpdoctor" (see ddpdoctor/plugins.py and
plugins/ddpdoctor-example-detector/README.md).
"""

from __future__ import annotations

from typing import Any

from pluggy import HookimplMarker, HookspecMarker

hookspec = HookspecMarker("ddpdoctor")
hookimpl = HookimplMarker("ddpdoctor")


@hookspec
def register_detectors(register: Any) -> None:
    """Register detectors: ``register(name, fn)`` with ``fn(job: JobView) -> list[Finding]``."""


@hookspec
def register_exporters(register: Any) -> None:
    """Register exporters: ``register(format, fn)`` with ``fn(job: JobView, path: Path)``."""


@hookspec
def register_commands(subparsers: Any) -> None:
    """Add `ddpdoctor` subcommands: ``subparsers.add_parser(...).set_defaults(handler=fn)``."""
