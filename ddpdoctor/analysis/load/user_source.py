"""Read the user's source around a call site: is the call under a rank-dependent branch?"""

from __future__ import annotations

import ast
import functools
import re

from ddpdoctor.errors import UserError
from ddpdoctor.rundir.bounded import read_file

RANK_WORDS = re.compile(r"rank|is_main|main_process|is_master|master|process_zero|global_zero|"
                        r"^exists$|^isfile$|^is_file$", re.IGNORECASE)
MAX_SOURCE_BYTES = 2 << 20


@functools.lru_cache(maxsize=32)
def read_source(path: str) -> str | None:
    """The text of the source file a trace names, or None: a regular file of at most
    MAX_SOURCE_BYTES only (a call site naming a FIFO or /dev/zero is read from no more)."""
    try:
        return read_file(path, MAX_SOURCE_BYTES, follow=True).decode("utf-8", "replace")
    except (OSError, UserError):
        return None


def line_of(path: str, line: int) -> str:
    """Line ``line`` (from 1) of the source file ``path``, "" when there is none."""
    text = read_source(path)
    lines = text.splitlines() if text is not None and line > 0 else []
    return lines[line - 1] if line <= len(lines) else ""


@functools.lru_cache(maxsize=64)
def _parse(path: str) -> tuple[ast.AST, str] | None:
    text = read_source(path)
    if text is None:
        return None
    try:
        return ast.parse(text), text
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def split_callsite(callsite: str) -> tuple[str, int]:
    path, _, line = callsite.rpartition(":")
    return (path, int(line)) if line.isdigit() else (callsite, 0)


def _parsed_at(callsite: str) -> tuple[ast.AST, str, int] | None:
    """(the module's tree, its text, the line) of a ``path:line``, or None."""
    path, line = split_callsite(callsite)
    parsed = _parse(path)
    return None if parsed is None or line <= 0 else (parsed[0], parsed[1], line)


def _depends_on_rank(test: ast.AST) -> bool:
    """Does the condition name the rank (or a per-rank fact)?  Names and attributes count,
    string contents do not."""
    for node in ast.walk(test):
        name = node.id if isinstance(node, ast.Name) else \
            node.attr if isinstance(node, ast.Attribute) else None
        if name and RANK_WORDS.search(name):
            return True
    return False


def source_line(callsite: str) -> str:
    """The text of the call site's line, stripped, or ""."""
    path, line = split_callsite(callsite)
    parsed = _parse(path)
    if parsed is None or line <= 0:
        return ""
    lines = parsed[1].splitlines()
    return lines[line - 1].strip() if line <= len(lines) else ""


def rank_condition(callsite: str) -> str | None:
    """The innermost ``if``/``while`` test enclosing the call site that depends on the rank
    (or on a per-rank fact such as a file's existence), as source text, else None."""
    at = _parsed_at(callsite)
    if at is None:
        return None
    tree, text, line = at
    best: tuple[int, str] | None = None
    for node in ast.walk(tree):
        if not isinstance(node, (ast.If, ast.While, ast.IfExp)):
            continue
        end = getattr(node, "end_lineno", None) or node.lineno
        if not node.lineno <= line <= end:
            continue
        test = ast.get_source_segment(text, node.test) or ""
        if not _depends_on_rank(node.test):
            continue
        in_else = isinstance(node, ast.If) and node.orelse and \
            node.orelse[0].lineno <= line
        keyword = "while" if isinstance(node, ast.While) else "if"
        shown = f"else of `{keyword} {test}`" if in_else else f"`{keyword} {test}:`"
        if best is None or node.lineno > best[0]:
            best = (node.lineno, shown)
    return best[1] if best else None


UNORDERED = re.compile(r"\.(items|keys|values)\(\)|^set\(|^\{|listdir|glob|iterdir|scandir")


def keyed_loop(callsite: str) -> str | None:
    """The innermost ``for`` header enclosing the call site that iterates a mapping (its
    items, keys or values), a set or a directory listing: an order each rank makes for
    itself (a dict's is the order its keys were added on that rank), as source text."""
    at = _parsed_at(callsite)
    if at is None:
        return None
    tree, text, line = at
    best: tuple[int, str] | None = None
    for node in ast.walk(tree):
        if not isinstance(node, (ast.For, ast.AsyncFor)):
            continue
        end = getattr(node, "end_lineno", None) or node.lineno
        if not node.lineno < line <= end:
            continue
        over = ast.get_source_segment(text, node.iter) or ""
        if UNORDERED.search(over) and (best is None or node.lineno > best[0]):
            target = ast.get_source_segment(text, node.target) or "_"
            best = (node.lineno, f"`for {target} in {over}:`")
    return best[1] if best else None


def file_mentions(callsite: str, words: str) -> bool:
    """Does the call site's file contain ``words`` (outside nothing: a plain text search)?"""
    parsed = _parse(split_callsite(callsite)[0])
    return parsed is not None and words in parsed[1]


LAUNCHER_MARK = "ddpdoctor: launcher"


@functools.lru_cache(maxsize=256)
def declares_launcher(path: str) -> bool:
    """Does the file say, in its first lines (``# ddpdoctor: launcher``), that it only
    starts ranks that run the script named after it?  Its frames are not the user's code,
    and lint before the run reads the script after it."""
    try:
        head = read_file(path, 2048, follow=True, head=True)
    except (OSError, UserError):
        return False
    return LAUNCHER_MARK in head.decode("utf-8", "replace")
