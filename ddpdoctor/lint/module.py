"""ParsedModule: one linted file's tree, lines and imports, and qualified names of expressions."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from ddpdoctor.errors import UserError

BUFFER_WORDS = ("BatchNorm", "InstanceNorm", "register_buffer", "running_mean")


@dataclass
class ParsedModule:
    """A parsed Python file and what its imports make of a dotted name.

    Args:
        path: the file as given on the command line (or found under a directory given).
        tree: its syntax tree.
        lines: its source lines (for conditions, ignore comments).
        aliases: local name -> the qualified name it was imported as
            (``dist`` -> ``torch.distributed``, ``DDP`` -> ``torch.nn.parallel.DistributedDataParallel``).
    """

    path: str
    tree: ast.Module
    lines: list[str]
    aliases: dict[str, str] = field(default_factory=dict)

    def line(self, lineno: int) -> str:
        """Source line ``lineno`` (1-based), stripped; empty when out of range."""
        return self.lines[lineno - 1].strip() if 0 < lineno <= len(self.lines) else ""

    def buffer_classes(self) -> set[str]:
        """The file's classes whose modules hold buffers (a BatchNorm, a register_buffer)."""
        cached = self.__dict__.get("_buffer_classes")
        if cached is None:
            cached = {node.name for node in ast.walk(self.tree) if isinstance(node, ast.ClassDef)
                      and any(w in ast.unparse(node) for w in BUFFER_WORDS)}
            self.__dict__["_buffer_classes"] = cached
        return cached

    def classes(self) -> dict[str, ast.ClassDef]:
        """The file's top-level classes by name."""
        cached = self.__dict__.get("_classes")
        if cached is None:
            cached = {n.name: n for n in self.tree.body if isinstance(n, ast.ClassDef)}
            self.__dict__["_classes"] = cached
        return cached

    def qualified(self, node: ast.expr) -> str | None:
        """The dotted name ``node`` stands for through the imports, e.g. ``dist.barrier`` ->
        ``torch.distributed.barrier``; None for anything but a name or attribute chain."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(self.aliases.get(node.id, node.id))
        return ".".join(reversed(parts))


def _collect_aliases(tree: ast.Module) -> dict[str, str]:
    """Every import of the file, at any depth (imports inside functions count too)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    aliases.setdefault(a.name.split(".")[0], a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def parse_module(path: Path, shown: str) -> ParsedModule:
    """Parse ``path``; a UserError (exit 2) when it cannot be read or is not valid Python."""
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {shown} as Python source ({e.__class__.__name__}); "
                        "give Python files or directories that hold them", 2) from None
    try:
        return parse_source(text, shown)
    except RecursionError:
        raise UserError(f"{shown} is nested too deeply for Python's parser; leave it out", 2) \
            from None
    except (SyntaxError, ValueError) as e:
        where = f" at line {e.lineno}" if isinstance(e, SyntaxError) and e.lineno else ""
        raise UserError(f"{shown} is not valid Python{where}: fix the syntax error or leave "
                        "the file out", 2) from None


def parse_source(text: str, shown: str) -> ParsedModule:
    """Parse source text; SyntaxError (or ValueError) when it is not valid Python."""
    tree = ast.parse(text, filename=shown)
    return ParsedModule(shown, tree, text.splitlines(), _collect_aliases(tree))
