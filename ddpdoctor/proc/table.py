"""The process table as /proc tells it: state, parent, group, session and start time."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class ProcInfo:
    """One line of /proc/<pid>/stat, the fields ddpdoctor needs."""

    pid: int
    state: str  # R, S, D, T (stopped), Z (zombie), X
    ppid: int
    pgrp: int
    session: int
    start: int  # clock ticks after boot: with the pid, names one process for good


def _parse(pid: int, raw: bytes) -> ProcInfo | None:
    try:
        fields = raw.rsplit(b")", 1)[1].split()
        return ProcInfo(pid, fields[0].decode(), int(fields[1]), int(fields[2]),
                        int(fields[3]), int(fields[19]))
    except (IndexError, ValueError):
        return None


def proc_info(pid: int) -> ProcInfo | None:
    """``pid``'s entry, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return _parse(pid, f.read())
    except OSError:
        return None


def alive(pid: int) -> bool:
    """Is ``pid`` running (not gone, not a zombie)?"""
    info = proc_info(pid)
    return info is not None and info.state not in ("Z", "X")


def proc_state(pid: int) -> str:
    """One-letter kernel state of ``pid`` (R, S, D, T stopped, Z zombie) or "" if gone."""
    info = proc_info(pid)
    return info.state if info is not None else ""


def live_state(pid: int) -> str | None:
    """The kernel state letter of a running ``pid``, None when it is gone or a zombie: the
    probe a live analysis is given (analysis itself never reads /proc)."""
    info = proc_info(pid)
    return info.state if info is not None and info.state not in ("Z", "X") else None


def scan() -> dict[int, ProcInfo]:
    """Every process visible in /proc now."""
    out: dict[int, ProcInfo] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            info = proc_info(int(name))
            if info is not None:
                out[info.pid] = info
    return out


def descendants(table: dict[int, ProcInfo], roots: Iterable[int]) -> set[int]:
    """Every process below ``roots`` in ``table`` by parent pid (the roots not included)."""
    children: dict[int, list[int]] = {}
    for p in table.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def with_environ(table: dict[int, ProcInfo], entry: str) -> set[int]:
    """The processes of ``table`` whose environment at exec held ``entry`` (``NAME=value``),
    as far as this user may read it: a job's processes carry the variables it was started
    with, in whatever session or parent they end up."""
    needle = entry.encode()
    found = set()
    for pid in table:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.add(pid)
        except OSError:
            continue  # gone, or another user's
    return found
