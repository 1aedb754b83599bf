"""lint_files: parse the files, summarise their functions, walk them, apply the rules."""

from __future__ import annotations

import ast
from pathlib import Path

from ddpdoctor.errors import UserError
from ddpdoctor.lint.findings import Condition, LintFinding, Severity, ignored
from ddpdoctor.lint.module import ParsedModule, UnparsableSource, parse_module, parse_source
from ddpdoctor.lint import sources as sources_of
from ddpdoctor.lint.param_reach import param_reach
from ddpdoctor.lint.project import ProjectReader
from ddpdoctor.lint.rules import Draft, dtype_divergence, duplicate_data, missing_set_epoch, \
    reentrant_checkpoint, seed_collision
from ddpdoctor.lint.program import FunctionInfo, Program, class_kinds as kinds_of_class
from ddpdoctor.lint.summaries import callee_first, callees, summarise_collectives
from ddpdoctor.lint.taint import Env
from ddpdoctor.lint.walker import FunctionWalker, ModuleFacts

SYNTAX_KIND = "syntax_error"
SKIP_DIRS = frozenset({".git", "__pycache__", ".venv", "venv", "node_modules", ".tox"})


def python_files(paths: list[Path]) -> list[tuple[Path, str]]:
    """The files to lint, with the name to show: files as given, directories' ``*.py``."""
    found: list[tuple[Path, str]] = []
    for path in paths:
        if path.is_dir():
            inside = [f for f in sorted(path.rglob("*.py"))
                      if not SKIP_DIRS & set(f.relative_to(path).parts[:-1])]
            if not inside:
                raise UserError(f"{path} holds no Python files (*.py); give the training "
                                "script or the directory that holds it", 2)
            found += [(f, str(f)) for f in inside]
        elif path.is_file():
            if not _python_file(path):
                raise UserError(f"{path} is not a Python file (neither *.py nor a python "
                                "#! line); give the training script or its directory", 2)
            found.append((path, str(path)))
        elif path.exists():
            raise UserError(f"{path} is neither a regular file nor a directory; give Python "
                            "files or directories that hold them", 2)
        else:
            raise UserError(f"{path}: no such file or directory; give Python files or "
                            "directories that hold them", 2)
    return _once_each(found)


def _once_each(found: list[tuple[Path, str]]) -> list[tuple[Path, str]]:
    """Each file once, under the first name it was given (``a.py ./a.py dir/`` name one file)."""
    seen: set[Path] = set()
    out = []
    for path, shown in found:
        real = path.resolve()
        if real not in seen:
            seen.add(real)
            out.append((path, shown))
    return out


def _python_file(path: Path) -> bool:
    """A file given by name is Python when it ends in ``.py`` (``.pyw``, ``.pyi``) or starts
    with a ``#!`` line that runs python (a script without the suffix)."""
    if path.suffix in (".py", ".pyw", ".pyi"):
        return True
    try:
        with path.open("rb") as f:
            first = f.readline(256)
    except OSError:
        return True  # let the parse report why it cannot be read
    return first.startswith(b"#!") and b"python" in first


def dataset_classes(module: ParsedModule) -> dict[str, ast.ClassDef]:
    """The file's classes that are datasets (a base named ``...Dataset``)."""
    out = {}
    for node in module.nodes():
        if isinstance(node, ast.ClassDef) and any(
                ast.unparse(b).endswith("Dataset") for b in node.bases):
            out[node.name] = node
    return out


def _module_functions(program: Program) -> dict[str, list[FunctionInfo]]:
    by_module: dict[str, list[FunctionInfo]] = {}
    for (path, _), info in program.functions.items():
        if not info.nested:  # walked with the function that defines it
            by_module.setdefault(path, []).append(info)
    return by_module


def _top_walker(program: Program, module: ParsedModule, datasets: set[str], quiet: bool,
                drafts: list[Draft], facts: ModuleFacts) -> FunctionWalker:
    """The walk of a file's top level: its state is where every function of it starts."""
    top = FunctionWalker(program, module, None, Env(), drafts.append, facts, datasets, quiet,
                         nested_defs=False)
    top.mark_before_ddp(module.tree.body)
    top.block(module.tree.body)
    top.env.before_ddp = False  # the functions run after the top level
    return top


def _walk_function(program: Program, module: ParsedModule, info: FunctionInfo, base: Env,
                   class_kinds: dict[str, dict[str, frozenset[str]]], datasets: set[str],
                   quiet: bool, drafts: list[Draft], facts: ModuleFacts) -> None:
    env = base.copy()
    if info.cls is not None:
        env.kinds.update(class_kinds.get(info.cls, {}))
    walker = FunctionWalker(program, module, info.cls, env, drafts.append, facts, datasets,
                            quiet, summary=quiet)
    walker.walk_function(info, info.node)


def _class_kinds(program: Program, module: ParsedModule) -> dict[str, dict[str, frozenset[str]]]:
    return {node.name: kinds_of_class(module, node.name)
            for node in module.tree.body if isinstance(node, ast.ClassDef)}


def _walk_module(program: Program, module: ParsedModule, functions: list[FunctionInfo],
                 datasets: set[str], quiet: bool, drafts: list[Draft],
                 facts: ModuleFacts) -> None:
    base = _top_walker(program, module, datasets, quiet, drafts, facts).env
    class_kinds = _class_kinds(program, module)
    for info in functions:
        if _worth_walking(program, info):
            _walk_function(program, module, info, base, class_kinds, datasets, quiet, drafts,
                           facts)


# what a function without a collective must hold for a rule to have anything to say in it: a
# rank value (a framework's stop flag, a replica changed, a model changed under a rank test), a
# seed or a DataLoader (seed collisions), the world size (splits that forget the rank)
FINDING_SOURCES = sources_of.RANK | sources_of.WORLD | sources_of.SEEDS


def _worth_walking(program: Program, info: FunctionInfo) -> bool:
    """Rule: a function is walked for findings when it reaches a collective (itself, through
    the functions it calls, or in a function defined inside it), when it may hold a rank value,
    or when its code starts what a rule without a collective looks for (FINDING_SOURCES, found
    by lint/sources.py); no rule can fire in any other function."""
    if info.site is not None or _may_hold_rank(program, info):
        return True
    if any(program.by_node.get(id(n)) is not None and program.by_node[id(n)].site is not None
           for n in info.module.own_nodes(info.node)
           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        return True
    return bool(sources_of.sources(info.module, info.node) & FINDING_SOURCES)


SUMMARY_ROUNDS = 4  # passes at most: what flows into attributes and parameters rarely nests


def _summarise_returns(program: Program, datasets: dict[str, dict[str, ast.ClassDef]]) -> None:
    """Quiet passes: what user functions return (callees before callers), and what flows into
    objects' attributes and functions' parameters; again, for the functions those facts reach
    (and their callers), while the facts grow. A function is walked when a call the analysis
    resolves reaches it (its result matters), or when it can put a rank value into an object or
    a parameter (it reads one, or holds one already)."""
    called = _resolved_callees(program)
    order = [info for info in callee_first(program) if _passes_values(program, info)]
    callers: dict[int, list[FunctionInfo]] = {}
    for info in order:
        for callee in callees(program, info):
            callers.setdefault(id(callee), []).append(info)
    pending = {id(info) for info in order
               if id(info) in called or _may_hold_rank(program, info)}
    bases: dict[str, tuple[Env, dict[str, dict[str, frozenset[str]]]]] = {}
    program.objects.take_dirty()
    for _ in range(SUMMARY_ROUNDS):
        for info in order:
            if id(info) not in pending:
                continue
            before = (info.returns, info.returns_elts)
            if info.site is None and all(c.returns is None for c in callees(program, info)) \
                    and not _may_hold_rank(program, info) and \
                    not sources_of.sources(info.module, info.node) & sources_of.ANY:
                info.returns = param_reach(info.node)  # its arguments, as they come
            else:
                path = info.module.path
                if path not in bases:
                    top = _top_walker(program, info.module, set(datasets[path]), True, [],
                                      ModuleFacts())
                    bases[path] = (top.env, _class_kinds(program, info.module))
                base, class_kinds = bases[path]
                _walk_function(program, info.module, info, base, class_kinds,
                               set(datasets[path]), True, [], ModuleFacts())
            if (info.returns, info.returns_elts) != before:  # its callers read it anew
                pending.update(id(c) for c in callers.get(id(info), ()))
        dirty = program.objects.take_dirty()
        if not dirty:
            return
        bases = {}  # the modules' top levels may read the grown facts too
        pending = _reached_by(order, dirty)


def _reached_by(order: list[FunctionInfo], dirty: set) -> set[int]:
    """The functions to walk again after facts grew: those whose parameters or class grew,
    and the functions that name a class whose attributes grew (they build its objects)."""
    grown_classes = tuple(key[1] for key in dirty if isinstance(key, tuple))
    return {id(info) for info in order
            if id(info.node) in dirty or (info.cls is not None and
                                          (info.module.path, info.cls) in dirty)
            or (grown_classes and info.module.mentions_words(info.node, grown_classes))}


def _may_hold_rank(program: Program, info: FunctionInfo) -> bool:
    """A function that may put a rank value into an object's attribute or a parameter: its
    code reads the rank (``dist.get_rank()``, ``RANK``, ``is_main_process``, a global that holds
    it, a ``@rank_zero_only`` body: lint/sources.py), it is a spawn target, or a parameter or its
    class's attribute already holds one."""
    objects = program.objects
    if objects.param_taints(info.node) or info.node.name in program.spawn_targets:
        return True
    if info.cls is not None and objects.class_attrs(info.module.path, info.cls):
        return True
    found = sources_of.sources(info.module, info.node)
    return bool(found & sources_of.RANK) or bool(found & sources_of.GLOBAL)


def _resolved_callees(program: Program) -> set[int]:
    """The functions some resolved call reaches (a function's or a file's top level): their
    results are read, so they are summarised."""
    found = {id(c) for info in program.functions.values() for c in callees(program, info)}
    for module in program.modules:
        for node in module.own_nodes(module.tree):
            if isinstance(node, ast.Call):
                callee = program.resolve(node, module, None)
                if callee is not None:
                    found.add(id(callee))
    return found


def _passes_values(program: Program, info: FunctionInfo) -> bool:
    """A function that can hand a value on: it returns one, sets an attribute, or calls a
    linted function or class with arguments (None and no call at all are the same on every
    rank)."""
    for n in info.module.nodes(info.node):
        if isinstance(n, ast.Return) or (isinstance(n, ast.Attribute) and
                                         isinstance(n.ctx, ast.Store)):
            return True
        if isinstance(n, ast.Call) and (n.args or n.keywords) and (
                program.resolve(n, info.module, info.cls) is not None or
                (info.module.qualified(n.func) or "") in info.module.classes()):
            return True
    return False


def _set_epoch_functions(program: Program) -> set[str]:
    """Names of the functions that call ``set_epoch`` themselves."""
    return {info.node.name for info in program.functions.values()
            if any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                   and c.func.attr == "set_epoch" for c in info.module.nodes(info.node))}


def _file_rules(module: ParsedModule, functions: list[FunctionInfo],
                datasets: dict[str, ast.ClassDef], set_epoch_functions: set[str],
                facts: ModuleFacts) -> list[Draft]:
    drafts: list[Draft] = []
    known = {id(info.node) for info in functions}
    scopes: list[ast.AST] = [module.tree] + [info.node for info in functions]
    scopes += [n for n in module.nodes() if isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(n) not in known]
    samplers = module.mentions_words(module.tree, ("distributedsampler",))
    for scope in scopes:
        if samplers:  # the rule is about a DistributedSampler the file names
            drafts += missing_set_epoch.check(scope, module, set_epoch_functions)
        if facts.uneven_loops and not isinstance(scope, ast.Module):
            drafts += dtype_divergence.check(scope, module, facts.uneven_loops)
    draws = {name: seed_collision.draws(cls, module) for name, cls in datasets.items()}
    drafts += seed_collision.check(facts.loaders, facts.seeds, draws)
    drafts += [duplicate_data.check(line) for line in sorted(facts.world_splits)]
    return drafts


def _finding(module: ParsedModule, draft: Draft) -> LintFinding:
    cond = None
    if draft.condition_line is not None:
        cond = Condition(module.path, draft.condition_line, module.line(draft.condition_line))
    return LintFinding(draft.kind, draft.severity, module.path, draft.line, draft.collective,
                       cond, draft.message, draft.fix)


def lint_modules(modules: list[ParsedModule],
                 context: list[ParsedModule] | None = None) -> list[LintFinding]:
    """The findings of the parsed files, sorted by file and line, ignore comments applied.
    ``context``: project modules the files import, read for what their functions do (their
    collectives, what they return), never reported on."""
    context = [m for m in context or [] if m not in modules]
    program = Program(modules + context, {m.path for m in context})
    summarise_collectives(program)
    by_module = _module_functions(program)
    datasets = {m.path: dataset_classes(m) for m in program.modules}
    _summarise_returns(program, datasets)
    set_epoch_functions = _set_epoch_functions(program)
    wraps = reentrant_checkpoint.ddp_wraps(modules)
    findings: list[LintFinding] = []
    for module in modules:
        drafts: list[Draft] = []
        facts = ModuleFacts()
        functions = by_module.get(module.path, [])
        _walk_module(program, module, functions, set(datasets[module.path]), False, drafts,
                     facts)
        drafts += _file_rules(module, functions, datasets[module.path], set_epoch_functions,
                              facts)
        drafts += reentrant_checkpoint.check(module, wraps)
        findings += _module_findings(module, drafts)
    findings.sort(key=lambda f: (f.file, f.line, f.kind))
    return findings


def _module_findings(module: ParsedModule, drafts: list[Draft]) -> list[LintFinding]:
    """Drafts as findings: one a (line, kind), minus those an ignore comment silences."""
    out: list[LintFinding] = []
    seen: set[tuple[int, str]] = set()
    for draft in drafts:
        if (draft.line, draft.kind) in seen:
            continue
        seen.add((draft.line, draft.kind))
        line_text = module.lines[draft.line - 1] if 0 < draft.line <= len(module.lines) else ""
        if not ignored(line_text, draft.kind):
            out.append(_finding(module, draft))
    return out


def lint_files(paths: list[Path], follow: bool = True,
               project: Path | None = None) -> list[LintFinding]:
    """Lint files and directories; a UserError (exit 2) for a missing or unreadable one.
    A file that is not valid Python is one ``syntax_error`` finding; the others are linted.
    ``follow``: read the project modules the files import (lint/project.py) for what their
    functions do; ``project``: the project's directory (default: the working directory, where
    the files lie under it)."""
    modules: list[ParsedModule] = []
    broken: list[LintFinding] = []
    for path, shown in python_files(paths):
        try:
            modules.append(parse_module(path, shown))
        except UnparsableSource as e:
            broken.append(syntax_error(e))
    context: list[ParsedModule] = []
    if follow:
        reader = ProjectReader([p.resolve() for p in paths if p.is_dir()])
        if project is not None:
            reader.cwd = project.resolve()
        context = reader.follow([(m, m.file) for m in modules if m.file is not None])
    try:
        findings = lint_modules(modules, context)
    except RecursionError:
        raise UserError("the code is nested too deeply to lint (Python's recursion limit); "
                        "lint the files one by one to find which", 2) from None
    return sorted(broken + findings, key=lambda f: (f.file, f.line, f.kind))


def syntax_error(e: UnparsableSource) -> LintFinding:
    """The finding for a file Python cannot parse: nothing in it can be checked."""
    return LintFinding(SYNTAX_KIND, Severity.ERROR, e.shown, e.line, "", None,
                       f"not valid Python ({e.reason}): nothing in this file was checked",
                       "fix the syntax (a Python 2 leftover?) or leave the file out")


def lint_source(source: str, name: str = "<source>") -> list[LintFinding]:
    """Lint one source text (tests, the catalogue)."""
    return lint_modules([parse_source(source, name)])
