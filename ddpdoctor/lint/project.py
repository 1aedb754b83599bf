"""ProjectReader: the user's project around the files given, read the way Python would import
it: where its modules are (the directory given, the script's own directory and package, the
directory tree up to the project's root), each module's dotted name, and the project modules the
files import, followed a few imports deep so that a helper's collectives, a context manager's
barriers and a wrapper around ``torch.distributed`` are seen where they are called.

Only the project's own files are followed: never an installed package (site-packages) other
than the one a file given belongs to, never a directory a linter skips (``.git``, a venv).
Parsed files are kept for the process (keyed by path, size and modification time), so linting
the files of one project one by one parses each helper once."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ddpdoctor.lint.module import ParsedModule, UnparsableSource, parse_module

MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")  # a project's root holds one
MAX_UP = 6  # directories looked at above a file for the project's root
FOLLOW_DEPTH = 3  # imports followed from a file given, hop by hop
FOLLOW_MAX = 120  # project modules read besides the files given, at most
INSTALLED = ("site-packages", "dist-packages")

_PARSED: dict[tuple[str, int, int], ParsedModule | None] = {}  # (path, size, mtime) -> module
_FOUND: dict[tuple[tuple[Path, ...], Path, str], Path | None] = {}
_LAYOUTS: dict[tuple[Path, tuple[Path, ...], Path], "Layout"] = {}
_STATS: dict[str, tuple[bool, bool]] = {}  # path -> (is a file, is a directory)


def _stat(path: str | Path) -> tuple[bool, bool]:
    key = str(path)
    found = _STATS.get(key)
    if found is None:
        found = _STATS[key] = (os.path.isfile(key), os.path.isdir(key))
    return found


def _is_file(path: str | Path) -> bool:
    return _stat(path)[0]


def _is_dir(path: str | Path) -> bool:
    return _stat(path)[1]


def _stat_key(path: Path) -> tuple[str, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (str(path), st.st_size, st.st_mtime_ns)


def read_module(path: Path, shown: str) -> ParsedModule | None:
    """A project module parsed once per process (None when it cannot be read or parsed: a
    helper lint cannot read is a helper it does not see)."""
    key = _stat_key(path)
    if key is None:
        return None
    if key not in _PARSED:
        try:
            _PARSED[key] = parse_module(path, shown)
        except (UnparsableSource, OSError, ValueError):
            _PARSED[key] = None
        except Exception as e:  # noqa: BLE001 - a UserError: unreadable, the same answer
            _PARSED[key] = None if e.__class__.__name__ == "UserError" else None
    return _PARSED[key]


def _package_top(directory: Path) -> Path:
    """The directory that holds the outermost package ``directory`` is part of (itself when it
    is no package)."""
    top = directory
    while _is_file(top / "__init__.py") and top.parent != top:
        top = top.parent
    return top


def _project_root(directory: Path) -> Path | None:
    """The nearest directory at or above ``directory`` holding a project marker."""
    cur = directory
    for _ in range(MAX_UP):
        if any((cur / m).exists() for m in MARKERS):
            return cur
        if cur.parent == cur:
            return None
        cur = cur.parent
    return None


@dataclass
class Layout:
    """Where one file's imports are looked for, and the directory they must stay under."""

    roots: list[Path]
    scope: Path

    def find(self, dotted: str) -> Path | None:
        """The file of project module ``dotted`` (``pkg/mod.py`` or ``pkg/mod/__init__.py``)."""
        key = (tuple(self.roots), self.scope, dotted)
        if key not in _FOUND:
            _FOUND[key] = self._find(dotted)
        return _FOUND[key]

    def _find(self, dotted: str) -> Path | None:
        if not dotted or not all(p.isidentifier() for p in dotted.split(".")):
            return None
        parts = dotted.split(".")
        rel = os.path.join(*parts)
        scope = str(self.scope)
        for root in map(str, self.roots):
            if not _is_dir(os.path.join(root, parts[0])) and \
                    not _is_file(os.path.join(root, parts[0] + ".py")):
                continue  # the top-level name is not here: no need to look further down
            for cand in (os.path.join(root, rel + ".py"), os.path.join(root, rel, "__init__.py")):
                if _is_file(cand) and _under(Path(cand), Path(scope)):
                    return Path(cand)
        return None

    def name_of(self, path: Path) -> str | None:
        """The dotted name ``path`` is imported by from the first root it lies under."""
        for root in self.roots:
            try:
                rel = path.relative_to(root)
            except ValueError:
                continue
            parts = list(rel.with_suffix("").parts)
            if parts and parts[-1] == "__init__":
                parts = parts[:-1]
            if parts and all(p.isidentifier() for p in parts):
                return ".".join(parts)
        return None


def _under(path: Path, scope: Path) -> bool:
    try:
        rel = path.relative_to(scope)
    except ValueError:
        return False
    return not any(p in (".git", "__pycache__", ".venv", "venv", "node_modules", ".tox")
                   for p in rel.parts)


def layout_for(path: Path, given_dirs: list[Path], cwd: Path) -> Layout:
    """Where a file's project modules are (see ``_layout``), worked out once per directory."""
    key = (path.parent, tuple(given_dirs), cwd)
    if key not in _LAYOUTS:
        _LAYOUTS[key] = _layout(path, given_dirs, cwd)
    return _LAYOUTS[key]


def _layout(path: Path, given_dirs: list[Path], cwd: Path) -> Layout:
    """Where a file's project modules are: its own directory, the directory that holds its
    package, a directory given that holds it, the working directory when the file lies under
    it, and the project's root (a directory with .git, pyproject.toml, setup.py or setup.cfg)
    and its ``src/``; all within the project (an installed package: that package alone)."""
    here = path.parent
    top = _package_top(here)
    roots = [here, top]
    roots += [d for d in given_dirs if _under(path, d)]
    if _under(path, cwd):
        roots.append(cwd)
    installed = next((i for i, p in enumerate(here.parts) if p in INSTALLED), None)
    if installed is not None:
        scope = Path(*here.parts[:installed + 2]) if len(here.parts) > installed + 1 else top
        roots.append(Path(*here.parts[:installed + 1]))
    else:
        root = _project_root(here)
        if root is not None:
            roots += [root, root / "src"]
        scope = min((r for r in roots if _under(path, r)), key=lambda r: len(r.parts))
    seen: list[Path] = []
    for r in roots:
        if r not in seen and r.is_dir():
            seen.append(r)
    return Layout(seen, scope)


@dataclass
class ProjectReader:
    """Reads the project modules the files given import, and names every module."""

    given_dirs: list[Path]
    cwd: Path = field(default_factory=lambda: Path(os.getcwd()).resolve())

    def follow(self, modules: list[tuple[ParsedModule, Path]]) -> list[ParsedModule]:
        for cache in (_STATS, _FOUND, _LAYOUTS):  # the disk may have changed since last time
            cache.clear()
        return self._follow(modules)

    def _follow(self, modules: list[tuple[ParsedModule, Path]]) -> list[ParsedModule]:
        """Resolve each module's (parsed from the path beside it) imports of project modules;
        return the project modules they import, followed hop by hop (``FOLLOW_DEPTH`` deep,
        ``FOLLOW_MAX`` at most), resolved the same way."""
        known: dict[Path, ParsedModule] = {p: m for m, p in modules}
        frontier = [(m, p) for m, p in modules]
        followed: list[ParsedModule] = []
        for _ in range(FOLLOW_DEPTH + 1):
            nxt: list[tuple[ParsedModule, Path]] = []
            for module, path in frontier:
                layout = layout_for(path, self.given_dirs, self.cwd)
                for target in self._resolve_imports(module, path, layout):
                    if target in known or len(followed) >= FOLLOW_MAX:
                        continue
                    found = read_module(target, str(target))
                    if found is None:
                        continue
                    known[target] = found
                    found.file = target
                    followed.append(found)
                    nxt.append((found, target))
            frontier = nxt
            if not frontier:
                break
        for module, path in frontier:  # the last hop: resolved, not followed further
            self._resolve_imports(module, path, layout_for(path, self.given_dirs, self.cwd))
        return followed

    def _resolve_imports(self, module: ParsedModule, path: Path, layout: Layout) -> list[Path]:
        """Record which project file each of the module's imports names (relative imports
        given a dotted name of their own) and return those files."""
        if module.import_files:
            return list(module.import_files.values())
        for name, level, taken in module.imports:
            if level == 0:
                file = layout.find(name)
                dotted = name
            else:
                dotted, file = self._relative(name, level, path, layout, module)
            if file is not None:
                module.import_files[dotted] = file
            for item, local in taken:
                sub = layout.find(f"{dotted}.{item}") if level == 0 else \
                    self._relative(f"{name}.{item}" if name else item, level, path, layout,
                                   module)[1]
                if sub is not None:  # from pkg import submodule
                    module.import_files[f"{dotted}.{item}"] = sub
                if level > 0:
                    module.aliases[local] = f"{dotted}.{item}"
        return list(module.import_files.values())

    @staticmethod
    def _relative(name: str, level: int, path: Path, layout: Layout,
                  module: ParsedModule) -> tuple[str, Path | None]:
        """A relative import's dotted name (``_rel1_data_stream``: unique within the file) and
        its file when it is a module of the project."""
        base_dir = path.parent
        for _ in range(level - 1):
            base_dir = base_dir.parent
        target = base_dir.joinpath(*name.split(".")) if name else base_dir
        dotted = f"_rel{level}_" + (name.replace(".", "_") if name else "pkg")
        for cand in (target.with_suffix(".py"), target / "__init__.py"):
            if _is_file(cand) and _under(cand, layout.scope):
                return dotted, cand
        return dotted, None
