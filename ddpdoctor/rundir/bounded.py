"""Reading files that may be hostile: regular files only, sizes checked before reading, JSON bounded.

A run dir is written by the user's processes, a report.json or a flight recorder dump can come
from anywhere, and ddpdoctor often reads them as root.  So a file is opened without following
a link at its name and without blocking (``O_NOFOLLOW|O_NONBLOCK``: a FIFO would hang the
reader), and it must be a regular file (not ``/dev/zero``, a FIFO, a socket) no larger than
the limit its reader gives, checked before a byte is read.  JSON is parsed with its nesting
(``MAX_DEPTH``) and numbers bounded: no ``NaN`` or ``Infinity``, no float that overflows, no
integer beyond 64 bits.  What fails is a ``BadInput``: a one-line error (exit 2) naming the
file; ``damaged`` tells a file that is only damaged (truncated, not JSON: its reader may
skip it) from one that is not what it claims to be.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from ddpdoctor.errors import UserError

MAX_DEPTH = 64  # nesting of JSON values ddpdoctor reads (its own reports nest 8 deep)
MAX_INT = 1 << 64  # integers beyond +-2**64 are no count, size or time of a real job
EXIT_BAD_INPUT = 2
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


class BadInput(UserError):
    """An input file that cannot be read as what it claims to be (exit 2).  ``damaged``: its
    content is damaged (a reader that tolerates damage may skip it); else it is no regular
    file or too large, and is never read."""

    def __init__(self, message: str, damaged: bool = False):
        super().__init__(message, EXIT_BAD_INPUT)
        self.damaged = damaged


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: Path | str, follow: bool = False) -> int:
    """A read-only descriptor of regular file ``path`` (a link at its name is refused unless
    ``follow``); never blocks.  Raises FileNotFoundError, BadInput, or another OSError."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise BadInput(f"{path} is a symbolic link: not read (a file of a run dir is "
                           "never a link)") from None
        if e.errno == errno.ENXIO:  # a FIFO or socket nobody serves
            raise BadInput(f"{path} is not a regular file: not read") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise BadInput(f"{path} is {_kind(st.st_mode)}, not a regular file: not read")
    return fd


def read_file(path: Path | str, limit: int, follow: bool = False, head: bool = False) -> bytes:
    """The bytes of regular file ``path``, checked to be at most ``limit`` before reading
    (``head``: a larger file is read up to ``limit``, e.g. an append-only log)."""
    fd = open_regular(path, follow)
    try:
        size = os.fstat(fd).st_size
        if size > limit and not head:
            raise BadInput(f"{path} is {size:,} bytes, more than the {limit:,} such a file "
                           "can be: not read")
        chunks, left = [], min(size, limit)
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break  # truncated meanwhile
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number ddpdoctor reads")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def check_bounds(value: Any, max_depth: int = MAX_DEPTH) -> str:
    """Why ``value`` (parsed JSON) is out of bounds: nested past ``max_depth``, or holding an
    integer beyond 64 bits ("" when it is within)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        if depth > max_depth:
            return f"nested more than {max_depth} deep"
        items = item.values() if type(item) is dict else item
        for v in items:
            t = type(v)
            if t is dict or t is list:
                push((v, depth + 1))
            elif t is int and not -MAX_INT < v < MAX_INT:
                return "an integer beyond 64 bits"
    return ""


def load_json(data: bytes, path: Path | str, max_depth: int = MAX_DEPTH) -> Any:
    """``data`` (the content of ``path``) parsed as JSON within bounds; BadInput(damaged)
    when it is not such JSON."""
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_constant,
                           parse_float=_float)
    except UnicodeDecodeError:
        raise BadInput(f"{path} is not UTF-8 text", damaged=True) from None
    except RecursionError:
        raise BadInput(f"{path} is nested too deeply to be read", damaged=True) from None
    except ValueError as e:  # not JSON, or a number out of range (json's own digit limit)
        raise BadInput(f"{path} is not valid JSON (truncated or damaged: "
                       f"{str(e).splitlines()[0][:120]})", damaged=True) from None
    if isinstance(value, (dict, list)):
        why = check_bounds(value, max_depth)
        if why:
            raise BadInput(f"{path} is out of bounds ({why}): not read", damaged=True)
    return value


def load_json_file(path: Path | str, limit: int, follow: bool = False,
                   max_depth: int = MAX_DEPTH) -> Any:
    """Regular file ``path`` (at most ``limit`` bytes) parsed as bounded JSON."""
    return load_json(read_file(path, limit, follow), path, max_depth)
