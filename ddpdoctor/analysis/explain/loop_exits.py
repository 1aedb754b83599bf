"""Read the user's source for the line where a rank left a loop alone: the `continue`,
`break` or `return` in a loop around a call site, and the condition that decided it."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ddpdoctor.analysis.load.user_source import _depends_on_rank, _parse, split_callsite

_LOOPS = (ast.For, ast.While, ast.AsyncFor)
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_DATA = re.compile(r"nan|inf|finite|loss|grad|batch|sample|label|data|norm|overflow",
                   re.IGNORECASE)
_CLOCK = re.compile(r"time|clock|deadline|elapsed|budget|timeout|now", re.IGNORECASE)
_FILES = re.compile(r"exists|isfile|is_file|isdir|path|listdir|glob|stat", re.IGNORECASE)
_SCORE = re.compile(r"val|score|metric|best|patience|acc|stop", re.IGNORECASE)


@dataclass(frozen=True)
class LoopExit:
    """A `continue` / `break` / `return` that leaves (part of) a loop around a call site.

    statement: the keyword; callsite: its ``path:line``; source: its line's text;
    condition: the innermost `if` test (or `except` clause) it sits under, as source text;
    decided_by: what that condition reads, in words (the rank's own data, clock, file
    system, validation score, or an exception it caught)."""

    statement: str
    callsite: str
    source: str
    condition: str | None
    decided_by: str


def _decided_by(condition: str | None, in_except: bool) -> str:
    if in_except:
        return "an exception this rank caught on its own"
    text = condition or ""
    for words, what in ((_CLOCK, "its own clock"), (_FILES, "its own view of the file system"),
                        (_SCORE, "its own validation score"), (_DATA, "its own data")):
        if words.search(text):
            return what
    return "a condition this rank evaluated alone"


def _exits(loop: ast.AST, kinds: tuple[type, ...]) -> list[tuple[ast.stmt, list[ast.AST]]]:
    """The statements of ``kinds`` that leave ``loop`` itself (a nested loop's `continue`
    and `break` are its own; nested functions are not looked into), each with its chain
    of enclosing nodes inside the loop, outermost first."""
    found: list[tuple[ast.stmt, list[ast.AST]]] = []

    def walk(nodes: list[ast.AST], chain: list[ast.AST]) -> None:
        for node in nodes:
            if isinstance(node, _FUNCS):
                continue
            if isinstance(node, kinds):
                found.append((node, chain))  # type: ignore[arg-type]
                continue
            if isinstance(node, _LOOPS) and ast.Return not in kinds:
                continue
            walk(list(ast.iter_child_nodes(node)), chain + [node])

    walk(list(getattr(loop, "body", [])), [])
    return found


def loop_exit(callsite: str, skipped: bool, innermost: bool = False) -> LoopExit | None:
    """The statement by which a rank left the loop around ``callsite`` (a call the others
    made and it did not): with ``skipped``, a `continue` (it skipped the rest of one
    iteration), else a `break` or `return` (it left the loop).  The innermost loop that
    has one (``innermost``: the innermost loop, or none); in a loop, the last such
    statement before the call's line, else the first."""
    path, line = split_callsite(callsite)
    parsed = _parse(path)
    if parsed is None or line <= 0:
        return None
    tree, text = parsed
    lines = text.splitlines()
    loops = [n for n in ast.walk(tree) if isinstance(n, _LOOPS) and
             n.lineno <= line <= (n.end_lineno or n.lineno)]
    loops.sort(key=lambda n: -n.lineno)
    loops = loops[:1] if innermost else loops
    kinds: tuple[type, ...] = (ast.Continue,) if skipped else (ast.Break, ast.Return)
    for loop in loops:
        exits = _exits(loop, kinds)
        if not exits:
            continue
        before = [e for e in exits if e[0].lineno < line]
        stmt, chain = (before[-1] if before else exits[0])
        return _described(stmt, chain, path, lines, text)
    return None


def _described(stmt: ast.stmt, chain: list[ast.AST], path: str, lines: list[str],
               text: str) -> LoopExit:
    condition, in_except = None, False
    for node in reversed(chain):
        if isinstance(node, ast.If) and condition is None:
            test = ast.get_source_segment(text, node.test) or ""
            in_else = bool(node.orelse) and node.orelse[0].lineno <= stmt.lineno
            condition = f"else of `if {test}`" if in_else else f"`if {test}:`"
        if isinstance(node, ast.ExceptHandler):  # (an `if` on what was caught: still it)
            kind = ast.get_source_segment(text, node.type) if node.type is not None else ""
            condition = condition or (f"`except {kind}:`" if kind else "`except:`")
            in_except = True
            break
    keyword = {ast.Continue: "continue", ast.Break: "break"}.get(type(stmt), "return")
    src = lines[stmt.lineno - 1].strip() if stmt.lineno <= len(lines) else keyword
    test = next((n.test for n in reversed(chain) if isinstance(n, ast.If)), None)
    flag = _flag_origin(path, test, stmt.lineno) if test is not None and not in_except \
        else None
    if flag is not None and flag[1]:
        condition = f"{condition} ({flag[1]})"
    return LoopExit(keyword, f"{path}:{stmt.lineno}", src, condition,
                    flag[0] if flag else _decided_by(condition, in_except))


def _flag_name(test: ast.AST) -> str | None:
    """The flag a condition tests: ``stop``, ``not stop``, ``self.stop``."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if isinstance(test, ast.Name):
        return test.id
    if isinstance(test, ast.Attribute):
        return test.attr
    return None


def _flag_origin(path: str, test: ast.AST, before: int) -> tuple[str, str] | None:
    """(what decided a flag the condition tests, a note on where) from the flag's last
    assignment before the exit: the rank, when it is set under a rank test (``if rank == 0:
    stop = poll()``), else what the assigned value reads; None when the condition is no
    bare flag or nothing says."""
    name = _flag_name(test)
    parsed = _parse(path)
    if name is None or parsed is None:
        return None
    tree, text = parsed
    last: ast.stmt | None = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and \
                node.lineno < before and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_flag_name(t) == name for t in targets) and \
                    (last is None or node.lineno > last.lineno):
                last = node
    if last is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.lineno < last.lineno <= \
                (node.end_lineno or node.lineno) and _depends_on_rank(node.test):
            rank_test = ast.get_source_segment(text, node.test) or ""
            return "its rank", (f"`{name}` is set under `if {rank_test}:` at line "
                                f"{last.lineno}")
    said = _decided_by(f"`{ast.get_source_segment(text, last.value) or ''}`", False)
    return None if said == "a condition this rank evaluated alone" else (said, "")
