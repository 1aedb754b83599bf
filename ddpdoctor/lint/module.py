"""ParsedModule: one linted file's tree, lines and imports, and qualified names of expressions."""

from __future__ import annotations

import ast
import io
import tokenize
import warnings
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
        file: the file it was read from (None for source text).
        import_files: the dotted names of the project's modules it imports (a relative import
            gets one of its own), each with its file (lint/project.py fills it).
    """

    path: str
    tree: ast.Module
    lines: list[str]
    aliases: dict[str, str] = field(default_factory=dict)
    file: Path | None = None  # the file itself, where it was read from one
    import_files: dict[str, Path] = field(default_factory=dict)  # project module -> its file
    imports: list[tuple[str, int, list[tuple[str, str]]]] = field(default_factory=list)

    def line(self, lineno: int) -> str:
        """Source line ``lineno`` (1-based), stripped; empty when out of range."""
        return self.lines[lineno - 1].strip() if 0 < lineno <= len(self.lines) else ""

    def nodes(self, scope: ast.AST | None = None) -> list[ast.AST]:
        """Every node under ``scope`` (the whole file by default): one walk of the file in
        pre-order, where each function's nodes are a slice."""
        spans = self.__dict__.get("_spans")
        if spans is None:
            order, spans = preorder(self.tree)
            self.__dict__["_order"], self.__dict__["_spans"] = order, spans
        order = self.__dict__["_order"]
        if scope is None or scope is self.tree:
            return order
        span = spans.get(id(scope))
        if span is None:
            return walk(scope)
        return order[span[0]:span[1]]

    def span(self, scope: ast.AST) -> tuple[int, int] | None:
        """Where a function's or class's nodes begin and end in ``nodes()`` (None: the file,
        or a node that is no scope)."""
        self.nodes()
        return None if scope is self.tree else self.__dict__["_spans"].get(id(scope))

    def inner_functions(self, scope: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        """The functions defined directly inside ``scope`` (a closure, a local helper), not
        those defined inside them, nor inside a nested class (lambdas hold no definitions):
        read off the file's pre-order walk, each nested scope's nodes skipped as a slice."""
        order = self.nodes()
        span = self.span(scope)
        if span is None:
            return []
        spans = self.__dict__["_spans"]
        out: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        i = span[0] + 1
        while i < span[1]:
            node = order[i]
            if isinstance(node, SCOPES):
                if not isinstance(node, ast.ClassDef):
                    out.append(node)  # type: ignore[arg-type]
                i = spans[id(node)][1]
            else:
                i += 1
        return out

    def own_nodes(self, scope: ast.AST) -> list[ast.AST]:
        """The nodes of a function's (or the file's) own body: nested functions, classes and
        lambdas left out, the scope itself too."""
        cache = self.__dict__.setdefault("_own", {})
        found = cache.get(id(scope))
        if found is None:
            found = cache[id(scope)] = list(own(scope))
        return found

    def buffer_classes(self) -> set[str]:
        """The file's classes whose modules hold buffers (a BatchNorm, a register_buffer)."""
        cached = self.__dict__.get("_buffer_classes")
        if cached is None:
            cached = {node.name for node in self.nodes() if isinstance(node, ast.ClassDef)
                      and mentions(self.nodes(node), BUFFER_WORDS)}
            self.__dict__["_buffer_classes"] = cached
        return cached

    def mentions_words(self, node: ast.AST, words: tuple[str, ...]) -> bool:
        """True when the source lines of ``node`` hold one of ``words`` (lower-cased)."""
        if node is self.tree:
            answers = self.__dict__.setdefault("_mentions", {})
            if words not in answers:
                text = "\n".join(self.lines).lower()
                answers[words] = any(w in text for w in words)
            return answers[words]
        start, end = getattr(node, "lineno", 1), getattr(node, "end_lineno", None)
        text = "\n".join(self.lines[start - 1:end]).lower()
        return any(w in text for w in words)

    def packages(self) -> set[str]:
        """The top-level packages the file imports (``lightning``, ``accelerate``)."""
        cached = self.__dict__.get("_packages")
        if cached is None:
            cached = {v.split(".", 1)[0] for v in self.aliases.values()}
            self.__dict__["_packages"] = cached
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
        cache = self.__dict__.setdefault("_qualified_names", {})  # keyed by the node itself
        if node in cache:
            return cache[node]
        cache[node] = found = self._qualified(node)
        return found

    def _qualified(self, node: ast.expr) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(self.aliases.get(node.id, node.id))
        return ".".join(reversed(parts))


def mentions(nodes: list[ast.AST], words: tuple[str, ...]) -> bool:
    """True when a name, attribute or string among ``nodes`` contains one of ``words`` (what
    ``ast.unparse(...)`` text would show, without writing the text)."""
    for n in nodes:
        text = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) \
            else n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) else None
        if text is not None and any(w in text for w in words):
            return True
    return False


def walk(node: ast.AST) -> list[ast.AST]:
    """Every node under ``node`` (itself included), breadth first: ``ast.walk`` as a list,
    without its generators (lint walks every tree several times)."""
    out = [node]
    i = 0
    while i < len(out):
        n = out[i]
        i += 1
        for name in n._fields:
            value = getattr(n, name, None)
            if isinstance(value, ast.AST):
                out.append(value)
            elif isinstance(value, list):
                out.extend(v for v in value if isinstance(v, ast.AST))
    return out


SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def own(scope: ast.AST) -> list[ast.AST]:
    """The nodes under ``scope``, not entering nested functions, classes or lambdas."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = [scope]
    while stack:
        node = stack.pop()
        if node is not scope and isinstance(node, NESTED):
            continue
        if node is not scope:
            out.append(node)
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, ast.AST):
                stack.append(value)
            elif isinstance(value, list):
                stack.extend(v for v in value if isinstance(v, ast.AST))
    return out


def preorder(tree: ast.AST) -> tuple[list[ast.AST], dict[int, tuple[int, int]]]:
    """Every node in pre-order, and where each function's or class's nodes begin and end."""
    order: list[ast.AST] = []
    spans: dict[int, tuple[int, int]] = {}
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, done = stack.pop()
        if done:
            spans[id(node)] = (spans[id(node)][0], len(order))
            continue
        if isinstance(node, SCOPES):
            spans[id(node)] = (len(order), -1)
            stack.append((node, True))
        order.append(node)
        children: list[ast.AST] = []
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, ast.AST):
                children.append(value)
            elif isinstance(value, list):
                children.extend(v for v in value if isinstance(v, ast.AST))
        stack.extend((c, False) for c in reversed(children))
    return order, spans


def _collect_imports(nodes: list[ast.AST]) -> list[tuple[str, int, list[tuple[str, str]]]]:
    """Every import of the file: (module, level, the names taken from it with their local
    names)."""
    out: list[tuple[str, int, list[tuple[str, str]]]] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [(a.name, 0, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.module or "", node.level,
                        [(a.name, a.asname or a.name) for a in node.names if a.name != "*"]))
    return out


def _collect_aliases(nodes: list[ast.AST]) -> dict[str, str]:
    """Every import of the file, at any depth (imports inside functions count too)."""
    aliases: dict[str, str] = {}
    for node in nodes:
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


def decode_source(data: bytes) -> str:
    """The text of a Python file as Python reads it: a UTF-8 BOM or a PEP 263 coding line
    honoured (``tokenize.detect_encoding``), else UTF-8; SyntaxError when it cannot be decoded."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as e:
        raise SyntaxError(f"cannot be decoded ({e.__class__.__name__})") from None


class UnparsableSource(Exception):
    """A file that is not valid Python: where and why (it becomes one ``syntax_error``)."""

    def __init__(self, shown: str, line: int, reason: str) -> None:
        super().__init__(f"{shown}:{line}: {reason}")
        self.shown, self.line, self.reason = shown, line, reason


def parse_module(path: Path, shown: str) -> ParsedModule:
    """Parse ``path``; a UserError (exit 2) when it cannot be read, UnparsableSource when it
    is not valid Python (a syntax error, an undecodable byte, nesting too deep to parse)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {shown} ({e.__class__.__name__}); give Python files or "
                        "directories that hold them", 2) from None
    try:
        module = parse_source(decode_source(data), shown)
        module.file = path.resolve()
        return module
    except RecursionError:
        raise UnparsableSource(shown, 1, "nested too deeply for Python's parser") from None
    except SyntaxError as e:
        raise UnparsableSource(shown, e.lineno or 1, e.msg or "invalid syntax") from None
    except ValueError as e:  # a null byte
        raise UnparsableSource(shown, 1, str(e) or "invalid source") from None


def parse_source(text: str, shown: str) -> ParsedModule:
    """Parse source text; SyntaxError (or ValueError) when it is not valid Python."""
    with warnings.catch_warnings():  # the user's invalid escapes are not lint's to report
        warnings.simplefilter("ignore")
        tree = ast.parse(text, filename=shown)
    module = ParsedModule(shown, tree, text.splitlines())
    imports = [n for n in module.nodes() if isinstance(n, (ast.Import, ast.ImportFrom))]
    module.aliases = _collect_aliases(imports)
    module.imports = _collect_imports(imports)
    return module
