"""The decision in the user's source that sent a rank down a path of its own: the branch
around a call site, the `no_sync()` choice before a backward, or the loop exit before a
call made after the loop; each with the rank-local input its condition reads."""

from __future__ import annotations

import ast
import enum
import re
from dataclasses import dataclass

from ddpdoctor.analysis.explain.loop_exits import LoopExit, loop_exit
from ddpdoctor.analysis.load.user_source import _parse, split_callsite


class Reads(str, enum.Enum):
    """What a condition reads, in words; SHARED: the same on every rank (a step counter)."""

    RANK = "its rank"
    CLOCK = "its own clock"
    FILES = "its own view of the file system"
    METRIC = "its own validation score"
    RANDOM = "its own random draw"
    DATA = "its own data"
    EXCEPTION = "an exception this rank caught on its own"
    UNKNOWN = "a condition this rank evaluated alone"
    SHARED = "a value every rank shares"

    @property
    def rank_local(self) -> bool:
        """Does the input differ from rank to rank (so the ranks may decide differently)?"""
        return self not in (Reads.SHARED, Reads.UNKNOWN)


_CLOCK = re.compile(r"time|clock|deadline|elapsed|budget|timeout|now\b", re.IGNORECASE)
_FILES = re.compile(r"exists|isfile|is_file|isdir|listdir|glob|stat\(|path", re.IGNORECASE)
_METRIC = re.compile(r"val|score|metric|best|patience|(?<![a-z])acc(uracy)?(?![a-z])|stop",
                     re.IGNORECASE)
_CONSTANT = re.compile(r"\b[A-Z][A-Z0-9_]*\b")  # ACC, MAX_STEPS: module constants, shared
_RANDOM = re.compile(r"random|rand\w*\(|uniform|bernoulli|coin|prob", re.IGNORECASE)
_DATA = re.compile(r"nan|inf\b|finite|loss|grad|batch|sample|label|data|norm|overflow|"
                   r"token|numel|len\(|size|count|length|seq", re.IGNORECASE)
_SHARED = re.compile(r"step|epoch|iter|micro|\bi\b|\bk\b|%|args\.|config|cfg", re.IGNORECASE)


_RANK = re.compile(r"rank|is_main|main_process|is_master|master|process_zero|global_zero",
                   re.IGNORECASE)


def _names(tree: ast.AST) -> list[str]:
    return [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(tree)
            if isinstance(n, (ast.Name, ast.Attribute))]


def classify(text: str, tree: ast.AST | None = None) -> Reads:
    """What a condition's source text reads (the rank first: it is the strongest fact)."""
    if tree is not None and any(_RANK.search(n) for n in _names(tree)):
        return Reads.RANK
    text = _CONSTANT.sub(" ", text)
    for words, what in ((_CLOCK, Reads.CLOCK), (_FILES, Reads.FILES),
                        (_METRIC, Reads.METRIC), (_RANDOM, Reads.RANDOM),
                        (_DATA, Reads.DATA)):
        if words.search(text):
            return what
    return Reads.SHARED if _SHARED.search(text) else Reads.UNKNOWN


@dataclass(frozen=True)
class Decision:
    """A statement of the user's source by which one rank took a path the others did not.

    statement: `if`, `while`, `break`, `continue`, `return` or `no_sync` (the choice of
    DDP's no_sync context before a backward); callsite: its ``path:line``; source: its
    line's text; condition: the test that decided it, as source (with what a bare name in it
    was assigned); reads: what the test reads."""

    statement: str
    callsite: str
    source: str
    condition: str | None
    reads: Reads

    @property
    def decided_by(self) -> str:
        return self.reads.value

    def text(self) -> str:
        """```break` at train.py:21 under `if val >= best:`, decided by its own ...``"""
        path, _, line = self.callsite.rpartition(":")
        short = f"{path.rsplit('/', 1)[-1]}:{line}"
        under = f" under {self.condition}" if self.condition and \
            self.statement in ("break", "continue", "return") else ""
        code = _without_comment(self.source)
        what = f"`{code}`" if self.statement != "no_sync" else \
            f"the choice of no_sync() `{code}`"
        return f"{what} at {short}{under}, decided by {self.decided_by}"

    def to_dict(self) -> dict[str, str | None]:
        return {"statement": self.statement, "callsite": self.callsite,
                "source": self.source, "condition": self.condition,
                "decided_by": self.decided_by, "reads": self.reads.name.lower()}


def _without_comment(line: str) -> str:
    """A source line without its trailing comment (a `#` outside quotes)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[:i].rstrip()
    return line


def _functions(tree: ast.AST) -> list[ast.AST]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _scope(tree: ast.AST, line: int) -> ast.AST:
    """The innermost function around ``line`` (else the module)."""
    around = [f for f in _functions(tree) if f.lineno <= line <= (f.end_lineno or f.lineno)]
    return max(around, key=lambda f: f.lineno) if around else tree


def _assigned(scope: ast.AST, name: str, before: int, text: str) -> str | None:
    """The source of the newest ``name = ...`` in ``scope`` before line ``before``."""
    best: tuple[int, str] | None = None
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and node.lineno < before and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            src = ast.get_source_segment(text, node.value) or ""
            if best is None or node.lineno > best[0]:
                best = (node.lineno, src)
    return best[1] if best else None


def _condition(test: ast.AST, scope: ast.AST, line: int, text: str) -> tuple[str, Reads]:
    """The test's source, with the value of each bare name it tests (``sync`` ->
    ``sync = tokens >= 40``), and what it reads."""
    src = ast.get_source_segment(text, test) or ""
    names = [n.id for n in ast.walk(test) if isinstance(n, ast.Name)]
    values = [f"{n} = {v}" for n in dict.fromkeys(names)
              if (v := _assigned(scope, n, line, text)) is not None and len(names) <= 3]
    read = classify(" ".join([src, *values]), test)
    if read == Reads.SHARED and values:
        read = classify(" ".join(values))
    return (f"`{src}`" + (f" ({'; '.join(values)})" if values else ""), read)


def branch_decision(callsite: str) -> Decision | None:
    """The innermost `if`/`while` around the call site whose test reads rank-local input."""
    path, line = split_callsite(callsite)
    parsed = _parse(path)
    if parsed is None or line <= 0:
        return None
    tree, text = parsed
    scope = _scope(tree, line)
    around = sorted((n for n in ast.walk(scope) if isinstance(n, (ast.If, ast.While)) and
                     n.lineno < line <= (n.end_lineno or n.lineno)),
                    key=lambda n: -n.lineno)
    for node in around:
        test_src = ast.get_source_segment(text, node.test) or ""
        if "__name__" in test_src:
            continue
        cond, read = _condition(node.test, scope, line, text)
        if read.rank_local:
            keyword = "while" if isinstance(node, ast.While) else "if"
            in_else = isinstance(node, ast.If) and bool(node.orelse) and \
                node.orelse[0].lineno <= line
            shown = f"else of `{keyword} {test_src}`" if in_else else \
                f"{keyword} {test_src}:"
            return Decision(keyword, f"{path}:{node.lineno}", shown, cond, read)
    return None


def no_sync_decision(callsite: str) -> Decision | None:
    """For a backward at ``callsite``: the `if` (or conditional expression) in the loop
    around it that chooses between DDP's no_sync() and a synced backward, when its test
    reads rank-local input."""
    path, line = split_callsite(callsite)
    parsed = _parse(path)
    if parsed is None or line <= 0:
        return None
    tree, text = parsed
    scope = _scope(tree, line)
    loops = [n for n in ast.walk(scope) if isinstance(n, (ast.For, ast.While)) and
             n.lineno <= line <= (n.end_lineno or n.lineno)]
    if not loops:
        return None
    loop = max(loops, key=lambda n: n.lineno)
    for node in ast.walk(loop):
        if not isinstance(node, (ast.If, ast.IfExp)):
            continue
        seg = ast.get_source_segment(text, node) or ""
        if "no_sync" not in seg and "require_backward_grad_sync" not in seg:
            continue
        cond, read = _condition(node.test, scope, line, text)
        if read.rank_local:
            src = text.splitlines()[node.lineno - 1].strip()
            return Decision("no_sync", f"{path}:{node.lineno}", src, cond, read)
    return None


def left_loop(inside: str, after: str) -> Decision | None:
    """The `break`/`return` by which a rank now at ``after`` (a call after a loop) left the
    loop in which the others still make the call at ``inside``, with what decided it."""
    path, line = split_callsite(inside)
    other, later = split_callsite(after)
    parsed = _parse(path)
    if parsed is None or other != path or line <= 0:
        return None
    loops = [n for n in ast.walk(parsed[0]) if isinstance(n, (ast.For, ast.While)) and
             n.lineno <= line <= (n.end_lineno or n.lineno)]
    if not any(later > (n.end_lineno or n.lineno) for n in loops):
        return None  # the later call is inside every loop of the earlier one: not left
    found = loop_exit(inside, skipped=False)
    return from_exit(found) if found is not None else None


def from_exit(e: LoopExit) -> Decision:
    """A loop exit read by branches.py, as a Decision."""
    read = next((r for r in Reads if r.value == e.decided_by), Reads.UNKNOWN)
    return Decision(e.statement, e.callsite, e.source, e.condition, read)
