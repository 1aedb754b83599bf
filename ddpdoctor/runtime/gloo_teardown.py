"""Keep torch 2.13's gloo teardown from hanging or aborting a rank as it exits."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Iterable

SETTLE_S = 0.05

_kept: list[Any] = []
_lock = threading.Lock()


def live_groups() -> list[Any]:
    """The process groups torch knows now (empty when torch.distributed is not loaded or
    its private group map has moved)."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    try:
        return list(c10d._world.pg_map) if c10d is not None else []  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a torch without the map: nothing to keep
        return []


def keep(groups: Iterable[Any]) -> None:
    """Keep destroyed groups alive until the process exits (``settle``).

    torch 2.13's gloo frees a finished Work on its worker thread after the caller has been
    woken.  When that free drops the last reference to a tensor that Python once held, it
    needs the GIL: while the main thread, holding it, destroys the group and joins that
    worker, the rank never exits (a hang); once the interpreter is finalizing, the worker
    thread is ended inside a C++ destructor and the process aborts ("terminate called
    without an active exception", SIGABRT), a job that had finished its work.  Kept here,
    the groups outlive ``destroy_process_group``; only the last destroy's groups are kept
    (a process that creates and destroys groups in a loop keeps one set)."""
    with _lock:
        _kept[:] = list(groups)


def settle(settle_s: float = SETTLE_S) -> None:
    """At exit, before the interpreter finalizes: if this process used process groups,
    give their workers ``settle_s`` with the GIL free to finish and free their last works,
    then drop the groups kept by ``keep``."""
    with _lock:
        kept = _kept[:]
        _kept.clear()
    if kept or live_groups():
        time.sleep(settle_s)
