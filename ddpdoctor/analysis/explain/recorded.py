"""The decision the ranks' recorded paths point to: the line where they parted, each rank's
outcome there and the values its condition read, and, when that line only acted on a value
decided earlier (a loop over ``range(start_step, n)``), the earlier branch that decided it.

The earlier branch is found by a backward slice over the source: the names the parting
line reads, the assignments to them in its function, the branches those assignments sit
under; of those, the one the ranks' records show them taking different ways is the one
that decided (``rank 1: `os.path.exists(state_path)` was False, so `start_step = 0` at
:16``).  Nothing here reads a name's spelling: only the record and the source's structure.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field

from ddpdoctor.analysis.align.paths import Parting, SiteKey, Way, earlier_ways, flows_of
from ddpdoctor.analysis.load.flow import FlowSite, RankFlow
from ddpdoctor.analysis.load.user_source import _parse
from ddpdoctor.analysis.model import JobView, ranks_text

SLICE_DEPTH = 3  # assignments followed back from the parting line


@dataclass(frozen=True)
class RankOutcome:
    """One rank at the decision: what it decided and what its condition read."""

    outcome: str  # true | false | iteration N | return | break | continue | raise X
    values: dict[str, str] = field(default_factory=dict)
    assigned: str = ""  # `start_step = 0` at file:line, when the decision set a value

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"outcome": self.outcome, "values": dict(self.values)}
        if self.assigned:
            out["assigned"] = self.assigned
        return out


@dataclass(frozen=True)
class RecordedDecision:
    """Where the ranks decided differently, from their records: the statement (file, line,
    source), each rank's outcome, and the line where their paths visibly parted when the
    decision came earlier (``parted_at``: ``file:line`` and its source)."""

    file: str
    line: int
    source: str
    ranks: dict[int, RankOutcome]
    parted_at: tuple[str, int, str] | None = None
    key: SiteKey | None = None

    @property
    def where(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"

    def sides(self) -> dict[str, tuple[int, ...]]:
        """The ranks grouped by their outcome (largest group first)."""
        by: dict[str, list[int]] = {}
        for r, o in sorted(self.ranks.items()):
            by.setdefault(o.outcome, []).append(r)
        return dict(sorted(((k, tuple(v)) for k, v in by.items()), key=lambda kv: -len(kv[1])))

    def to_dict(self) -> dict[str, object]:
        """The report's ``evidence.decision``."""
        out: dict[str, object] = {"file": self.file, "line": self.line, "source": self.source,
                                  "ranks": {str(r): o.to_dict()
                                            for r, o in sorted(self.ranks.items())}}
        if self.parted_at is not None:
            out["parted_at"] = {"file": self.parted_at[0], "line": self.parted_at[1],
                                "source": self.parted_at[2]}
        return out

    def text(self) -> str:
        """``rank 1: `os.path.exists(state_path)` was false (state_path='...'), so
        `start_step = 0` at resume.py:16; rank 0: true, ...`` in one sentence."""
        parts = []
        for outcome, ranks in self.sides().items():
            first = self.ranks[ranks[0]]
            who = ranks_text(ranks)
            vals = ", ".join(f"{k}={v}" for k, v in first.values.items()
                             if len(ranks) == 1 or all(self.ranks[r].values.get(k) == v
                                                       for r in ranks))
            piece = f"{who}: {outcome}" + (f" ({vals})" if vals else "")
            if first.assigned:
                piece += f", so {first.assigned}"
            parts.append(piece)
        return "; ".join(parts)


# -- the statement at a site ----------------------------------------------------------------
def statement_at(site: FlowSite) -> tuple[ast.AST | None, ast.AST | None, str]:
    """(the statement node at the site's line, its function or module, the line's source)."""
    parsed = _parse(site.file)
    if parsed is None:
        return None, None, ""
    tree, text = parsed
    lines = text.splitlines()
    source = lines[site.line - 1].strip() if 0 < site.line <= len(lines) else ""
    best, scope = None, tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                node.lineno <= site.line <= (node.end_lineno or node.lineno):
            if scope is tree or node.lineno > scope.lineno:  # type: ignore[attr-defined]
                scope = node
        if isinstance(node, (ast.If, ast.While, ast.For, ast.AsyncFor, ast.Assert,
                             ast.ExceptHandler, ast.IfExp, ast.comprehension)) and \
                getattr(node, "lineno", getattr(getattr(node, "target", None), "lineno", 0)) \
                == site.line:
            best = best or node
    return best, scope, source


def body_span(site: FlowSite) -> tuple[int, int] | None:
    """The first and last line of the body of the statement at ``site`` (None: no body)."""
    node, _, _ = statement_at(site)
    return body_lines(node) if node is not None else None


def body_lines(node: ast.AST) -> tuple[int, int] | None:
    body = getattr(node, "body", None)
    if isinstance(body, list) and body:
        return body[0].lineno, body[-1].end_lineno or body[-1].lineno
    return None


def enters_body(site: FlowSite, way: int, node: ast.AST | None) -> bool:
    """Did ``way`` of the site lead into its statement's body (the test held)?"""
    dest = site.fall if way == 0 else site.jump
    other = site.jump if way == 0 else site.fall
    span = body_lines(node) if node is not None else None
    if span is None or dest is None:
        return way == 0
    inside = span[0] <= dest <= span[1]
    if inside != (other is not None and span[0] <= other <= span[1]):
        return inside
    return way == 0  # both (a one-line body) or neither: falling through enters it


def entered_way(site: FlowSite) -> int:
    """The way of the site that enters its statement's body (0: falling through)."""
    node, _, _ = statement_at(site)
    return 0 if enters_body(site, 0, node) else 1


def _leaving(node: ast.AST | None) -> str | None:
    """What a body that ends by leaving does (after, say, a print): return, break,
    continue, raise X."""
    body = getattr(node, "body", None)
    last = body[-1] if isinstance(body, list) and body else None
    if isinstance(last, ast.Return):
        return "return"
    if isinstance(last, ast.Break):
        return "break"
    if isinstance(last, ast.Continue):
        return "continue"
    if isinstance(last, ast.Raise):
        exc = last.exc
        name = exc.func if isinstance(exc, ast.Call) else exc
        return "raise " + (ast.unparse(name) if name is not None else "")
    return None


def outcome_of(w: Way, flow: RankFlow, node: ast.AST | None) -> str:
    """A rank's outcome at a site in a segment, in the report's words: a loop's ``iteration
    N`` (counted over the rank's record) or ``false (left after N iterations)``, a test's
    ``true``/``false``, or what the body it entered does first (``return``, ``break``...)."""
    site = w.site
    if site.loop or isinstance(node, ast.While):
        inward = 0 if site.loop or enters_body(site, 0, node) else 1
        counts = (w.entry.fell, w.entry.jumped)
        went, left = counts[inward], counts[1 - inward]
        before = sum((e.entry.fell, e.entry.jumped)[inward]
                     for e in earlier_ways(flow, w.rank, site.key, w.segment.number))
        if left:
            return f"false (left after {before + went} iterations)"
        return f"iteration {before + went}" + ("+" if w.entry.saturated else "")
    way = 0 if w.entry.fell else 1
    if isinstance(node, ast.ExceptHandler):
        if not enters_body(site, way, node):
            return "false"
        return f"raise {ast.unparse(node.type) if node.type else 'an exception'}"
    if enters_body(site, way, node):
        return _leaving(node) or "true"
    return "false"


# -- the backward slice -----------------------------------------------------------------------
def _reads(node: ast.AST | None) -> set[str]:
    part = getattr(node, "iter", None) or getattr(node, "test", None) or node
    return {n.id for n in ast.walk(part) if isinstance(n, ast.Name)} if part else set()


def _bindings(scope: ast.AST, name: str, before: int) -> list[ast.stmt]:
    """The statements of ``scope`` (not nested functions) that assign ``name``."""
    out = []
    for node in _walk_scope(scope):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        if any(isinstance(t, ast.Name) and t.id == name or
               isinstance(t, (ast.Tuple, ast.List)) and any(
                   isinstance(e, ast.Name) and e.id == name for e in t.elts)
               for t in targets) and node.lineno != before:
            out.append(node)
    return out


def _walk_scope(scope: ast.AST) -> list[ast.AST]:
    out, stack = [], list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        out.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                 ast.ClassDef)):
            stack += list(ast.iter_child_nodes(node))
    return out


def _controls(scope: ast.AST, stmt: ast.stmt) -> list[ast.AST]:
    """The if/while/for/except nodes of ``scope`` whose body holds ``stmt``, innermost
    first."""
    found = []
    for node in _walk_scope(scope):
        if isinstance(node, (ast.If, ast.While, ast.For, ast.AsyncFor, ast.ExceptHandler,
                             ast.Try)) and node is not stmt:
            end = node.end_lineno or node.lineno
            if node.lineno < stmt.lineno <= end:
                found.append(node)
    return sorted(found, key=lambda n: -n.lineno)


def _slice_lines(site: FlowSite) -> dict[int, list[ast.stmt]]:
    """The lines of the branches that decide the values the site's statement reads, each
    with the assignments under it (followed back ``SLICE_DEPTH`` assignments)."""
    node, scope, _ = statement_at(site)
    if node is None or scope is None:
        return {}
    names, seen = _reads(node), set()
    lines: dict[int, list[ast.stmt]] = {}
    for _ in range(SLICE_DEPTH):
        nxt: set[str] = set()
        for name in names - seen:
            seen.add(name)
            for stmt in _bindings(scope, name, site.line):
                for ctrl in _controls(scope, stmt):
                    line = ctrl.lineno if not isinstance(ctrl, ast.Try) else None
                    if line is not None:
                        lines.setdefault(line, []).append(stmt)
                value = getattr(stmt, "value", None)
                nxt |= _reads(value) if value is not None else set()
        names = nxt
    return lines


def _ways_taken(flow: RankFlow, rank: int, key: SiteKey) -> set[int]:
    """The ways the rank took at ``key`` in everything it recorded (segments and notes)."""
    taken = {w for e in earlier_ways(flow, rank, key) for w, n in
             ((0, e.entry.fell), (1, e.entry.jumped)) if n}
    numbers = {s.number for s in flow.sites.values() if s.key == key}
    taken |= {n.way for n in flow.notes if n.site in numbers}
    return taken


def _site_at(flows: dict[int, RankFlow], file: str, line: int) -> list[SiteKey]:
    base = os.path.basename(file)
    keys = {s.key for f in flows.values() for s in f.sites.values()
            if s.key[0] == base and s.line == line}
    return sorted(keys, key=lambda k: k[2])


def _deciding(flows: dict[int, RankFlow], parting: Parting) -> tuple[SiteKey, dict[int, int],
                                                                     list[ast.stmt]] | None:
    """The earlier branch the slice leads to that the ranks took different ways, with each
    rank's one way there and the assignments under it."""
    site = parting.site
    for line, stmts in sorted(_slice_lines(site).items(), key=lambda kv: -kv[0]):
        for key in _site_at(flows, site.file, line):
            taken = {r: _ways_taken(f, r, key) for r, f in flows.items()}
            single = {r: next(iter(t)) for r, t in taken.items() if len(t) == 1}
            if len(single) == len(flows) and len(set(single.values())) > 1:
                return key, single, stmts
    return None


def _site_of(flow: RankFlow, key: SiteKey) -> FlowSite | None:
    return next((s for s in flow.sites.values() if s.key == key), None)


def _assigned(stmts: list[ast.stmt], node: ast.AST | None, entered: bool, file: str,
              values: dict[str, str]) -> str:
    """``start_step = 0`` at file:line: the assignment the rank's way ran, with the value
    the parting line read for it."""
    span = body_lines(node) if node is not None else None
    for stmt in stmts:
        inside = span is not None and span[0] <= stmt.lineno <= span[1]
        if inside != entered:
            continue
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) else getattr(stmt, "target")
        name = ast.unparse(target)
        value = values.get(name)
        text = f"`{name} = {value}`" if value is not None else f"`{ast.unparse(stmt)}`"
        return f"{text} at {os.path.basename(file)}:{stmt.lineno}"
    return ""


def recorded_decision(job: JobView, parting: Parting) -> RecordedDecision:
    """The decision behind ``parting``: the earlier branch the slice finds the ranks took
    different ways (each rank's one way there), else the parting line itself."""
    flows = flows_of(job, list(parting.ways) + list(parting.unreached))
    site = parting.site
    node, _, source = statement_at(site)
    found = _deciding(flows, parting)
    if found is not None:
        key, ways, stmts = found
        first = _site_of(flows[next(iter(ways))], key)
        if first is not None:
            dnode, _, dsource = statement_at(first)
            ranks = {}
            for r, way in ways.items():
                s = _site_of(flows[r], key) or first
                at_parting = parting.ways.get(r)
                read = flows[r].values(at_parting.site.number, 0 if at_parting.entry.fell
                                       else 1) if at_parting is not None else {}
                values = {**flows[r].values(s.number, way), **read}
                entered = enters_body(s, way, dnode)
                outcome = (_leaving(dnode) or "true") if entered else "false"
                ranks[r] = RankOutcome(outcome, values,
                                       _assigned(stmts, dnode, entered, first.file, values))
            return RecordedDecision(first.file, first.line, dsource, ranks,
                                    (site.file, site.line, source), key)
    ranks = {}
    for r, w in parting.ways.items():
        way = 0 if w.entry.fell else 1
        ranks[r] = RankOutcome(outcome_of(w, flows[r], node),
                               flows[r].values(w.site.number, way, w.segment.number))
    for r in parting.unreached:
        ranks[r] = RankOutcome("not reached")
    return RecordedDecision(site.file, site.line, source, ranks, None, parting.key)
