"""A collective issued while holding a lock that other ranks may be waiting to take."""

from __future__ import annotations

import ast

from ddpdoctor.lint.collectives import Site
from ddpdoctor.lint.findings import Severity
from ddpdoctor.lint.module import ParsedModule
from ddpdoctor.lint.rules import Draft

KIND = "lock_held_across_collective"
MESSAGE = ("{what} runs while the lock taken on line {lock} is held: a rank waiting for that "
           "lock never reaches the collective, and this rank never lets go")
FIX = "release the lock before the collective (or take it on every rank in the same order)"
LOCK_WORDS = ("lock", "Lock")


def acquires(stmt: ast.stmt, module: ParsedModule) -> str | None:
    """The lock a statement takes (``flock(f, LOCK_EX)``, ``lock.acquire()``), by its text."""
    call = stmt.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
    if call is None:
        return None
    name = module.qualified(call.func) or ""
    if name == "fcntl.flock" and len(call.args) == 2 and "LOCK_UN" not in ast.unparse(call.args[1]):
        return ast.unparse(call.args[0])
    if isinstance(call.func, ast.Attribute) and call.func.attr == "acquire":
        return ast.unparse(call.func.value)
    return None


def releases(stmt: ast.stmt, module: ParsedModule) -> str | None:
    """The lock a statement lets go of (``flock(f, LOCK_UN)``, ``lock.release()``)."""
    call = stmt.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
    if call is None:
        return None
    name = module.qualified(call.func) or ""
    if name == "fcntl.flock" and len(call.args) == 2 and "LOCK_UN" in ast.unparse(call.args[1]):
        return ast.unparse(call.args[0])
    if isinstance(call.func, ast.Attribute) and call.func.attr == "release":
        return ast.unparse(call.func.value)
    return None


def check(lock_line: int, site: Site) -> Draft:
    """Rule: no collective between taking a lock and letting it go (other ranks may block on
    the lock before their own call to the collective)."""
    return Draft(KIND, Severity.ERROR, site.line, site.name.split(" (")[0], lock_line,
                 MESSAGE.format(what=site.name, lock=lock_line), FIX)
