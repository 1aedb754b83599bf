"""A rank's life before training: its trace from process start, and the rendezvous calls.

A rank started by torchrun (RANK/WORLD_SIZE in its environment) or by mp.spawn gets its trace
when the process starts, with header state STARTING, so a rank stuck before
``init_process_group`` is visible.  ``init_process_group``, ``new_group`` and
``new_subgroups`` are recorded as MARK records (op ``init`` / ``new_group``) whose ``t_end``
stays 0 while the call runs: that rank is in the rendezvous (its header names its rank and
world size from then on, from init's arguments or the environment).
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable

from ddpdoctor.runtime import fr_dump, supervisor_watch
from ddpdoctor.runtime import recorder as R
from ddpdoctor.trace import layout as L

ENV_RANK_PID = "DDPDOCTOR_RANK_PID"  # set by a rank for its children: they are not ranks
_MARK = int(L.RecordKind.MARK)
_OP_INIT = L.OP_CODES["init"]
_OP_NEW_GROUP = L.OP_CODES["new_group"]
_new_groups = 0  # new_group calls so far: each is a collective over the default group
_local_rank: int | None = None  # known at process start (env, spawn index), else at init


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def _ancestors(limit: int = 16) -> set[int]:
    """The pids of this process's parent, its parent, ... (as far as /proc tells)."""
    found: set[int] = set()
    pid = os.getppid()
    while pid > 1 and pid not in found and len(found) < limit:
        found.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            pid = int(stat.rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return found


def is_rank_child() -> bool:
    """A descendant of a rank (a DataLoader worker, forked or spawned, or a subprocess): it
    carries the rank's environment but is not a rank."""
    marker = _env_int(ENV_RANK_PID)
    return marker is not None and marker != os.getpid() and marker in _ancestors()


def _is_helper_process() -> bool:
    """A child of a rank or multiprocessing's own helper: not a rank."""
    if is_rank_child():
        return True
    argv = getattr(sys, "orig_argv", sys.argv)
    return "--multiprocessing-fork" in argv or any(
        "multiprocessing" in a and ("resource_tracker" in a or "forkserver" in a)
        for a in argv)


def _start_rank_trace(rank: int, world_size: int, local_rank: int) -> None:
    """Create this rank's trace now, in state STARTING, and mark its children as non-ranks."""
    global _local_rank
    os.environ[ENV_RANK_PID] = str(os.getpid())
    _local_rank = local_rank
    _start_watchers()
    rec = R.active()
    if rec is None:
        return
    try:
        rec.rank = rank
        rec.writer.set_identity(rank, world_size, local_rank)
        rec.meta("starting", rank=rank, world_size=world_size, local_rank=local_rank)
    except Exception as e:  # noqa: BLE001 - recording must never break the job
        rec.fail("starting", e)


def _start_watchers() -> None:
    """A rank forked from an instrumented process (mp.start_processes with the fork start
    method, a forking launcher) has none of its parent's threads: start its own watchers
    (each a no-op where it runs already)."""
    try:
        supervisor_watch.start()
        if "torch" in sys.modules:
            fr_dump.install()
    except Exception as e:  # noqa: BLE001 - the rank runs on without them
        rec = R.existing()
        if rec is not None:
            rec.note_error("starting the rank's watchers", e)


def on_process_start() -> None:
    """At interpreter start: a rank launched by torchrun (or any launcher that sets RANK and
    WORLD_SIZE) gets its trace before the user's code runs."""
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is None or world is None or _is_helper_process():
        return
    local = _env_int("LOCAL_RANK")
    _start_rank_trace(rank, world, rank if local is None else local)


def on_spawn_child(index: int) -> None:
    """In an mp.spawn child, before the user's function runs.  The global rank is only known
    at init; on one node it is the spawn index, which is what the header says meanwhile."""
    if R.existing() is not None or _env_int("RANK") is not None:
        return
    nodes = _env_int("NNODES") or 1
    _start_rank_trace(index if nodes == 1 else -1, -1, index)


# -- rendezvous records ---------------------------------------------------------------------
def _open_mark(op_code: int, seq: int, aux: int) -> tuple[R.Recorder | None, int]:
    """Append a MARK record whose t_end stays 0 until ``_close_mark``."""
    rec = R.active()
    if rec is None:
        return None, -1
    try:
        text = f"|||{R.user_callsite(3)}".encode()[: L.TEXT_SIZE]
        now = R._time_ns()
        handle = rec.writer.append(_MARK, op_code, 0, 0, 0, seq, now, 0, 0, -1, aux, 0, -1,
                                   text)
        return rec, handle
    except Exception as e:  # noqa: BLE001 - recording must never break the call
        rec.fail("rendezvous record", e)
        return None, -1


def _identity_before_init(rec: R.Recorder | None, kwargs: dict) -> None:
    """Say who this rank is before the rendezvous blocks: from init_process_group's own
    ``rank``/``world_size`` arguments, else the environment as it is now (mp.spawn children
    often set RANK/WORLD_SIZE themselves just before init)."""
    if rec is None:
        return
    rank, world = kwargs.get("rank", -1), kwargs.get("world_size", -1)
    if not isinstance(rank, int) or rank < 0:
        rank = _env_int("RANK")
    if not isinstance(world, int) or world < 0:
        world = _env_int("WORLD_SIZE")
    if rank is None or rank < 0:
        return
    local = _env_int("LOCAL_RANK")
    try:
        rec.rank = rank
        rec.writer.set_identity(rank, world if world is not None else -1,
                                local if local is not None else (
                                    _local_rank if _local_rank is not None else rank))
    except Exception as e:  # noqa: BLE001 - recording must never break the call
        rec.fail("identity before init", e)


def _close_mark(rec: R.Recorder | None, handle: int, failed: bool = False) -> None:
    if rec is not None:
        rec.end(handle, failed)


def _wrap_init(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        rec, handle = _open_mark(_OP_INIT, 0, 0)
        _identity_before_init(rec, kwargs)
        fr_dump.check_buffer_env()  # a notice; never raises
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            _close_mark(rec, handle, failed=True)
            raise
        _close_mark(rec, handle)
        on_init()
        return result

    init_process_group.__ddpdoctor_original__ = fn  # type: ignore[attr-defined]
    return init_process_group


def _group_size(args: tuple, kwargs: dict) -> int:
    ranks = kwargs.get("ranks", args[0] if args else None)
    try:
        return len(ranks) if ranks is not None else -1
    except TypeError:
        return -1


def _wrap_new_group(fn: Callable, size_of: Callable[[tuple, dict], int]) -> Callable:
    @functools.wraps(fn)
    def new_group(*args: Any, **kwargs: Any) -> Any:
        global _new_groups
        seq = _new_groups
        _new_groups += 1
        try:
            size = size_of(args, kwargs)
        except Exception:  # noqa: BLE001 - a size we cannot tell is recorded as -1
            size = -1
        rec, handle = _open_mark(_OP_NEW_GROUP, seq, size)
        _new_group_meta(rec, seq, args, kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            _close_mark(rec, handle, failed=True)
            raise
        _close_mark(rec, handle)
        return result

    new_group.__ddpdoctor_original__ = fn  # type: ignore[attr-defined]
    return new_group


MAX_MEMBERS = 256  # a group's members listed in its new_group event, at most


def _new_group_meta(rec: R.Recorder | None, seq: int, args: tuple, kwargs: dict) -> None:
    """A ``new_group`` meta event: the call's number on this rank, the ranks it names (None:
    every rank), whether only its members synchronise (``use_local_synchronization``), and
    the user's line: a group that some ranks create and others do not is named there."""
    if rec is None:
        return
    try:
        ranks = kwargs.get("ranks", args[0] if args else None)
        members = sorted(int(r) for r in ranks) if ranks is not None else None
        rec.meta("new_group", seq=seq, site=R.user_callsite(3),
                 ranks=members[:MAX_MEMBERS] if members is not None else None,
                 size=len(members) if members is not None else -1,
                 local=bool(kwargs.get("use_local_synchronization", False)))
    except Exception as e:  # noqa: BLE001 - recording must never break the call
        rec.fail("new_group record", e)


def _caller(depth: int) -> Any:
    """The frame ``depth`` levels above the caller's, or the outermost there is."""
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame.f_back is None:
            break
        frame = frame.f_back
    return frame


def on_init() -> None:
    """After init_process_group: say who this process is."""
    rec = R.active()
    if rec is None:
        return
    try:
        import torch.distributed as dist

        rank, world = dist.get_rank(), dist.get_world_size()
        env_local = _env_int("LOCAL_RANK")
        local = env_local if env_local is not None else (
            _local_rank if _local_rank is not None else rank)
        rec.set_identity(rank, world, local)
        caller = _caller(2)
        if rec.flow is None:  # torch came before this process (a fork of a warm launcher)
            from ddpdoctor.runtime import control_flow

            rec.flow = control_flow.start(rec, caller)
        elif caller is not None:  # the script that called init
            rec.flow.instrument_stack(caller)
        rec.group_index(None)
        rec.meta("init", rank=rank, world_size=world, local_rank=local,
                 backend=str(dist.get_backend()), host=os.uname().nodename)
    except Exception as e:  # noqa: BLE001 - recording must never break the job
        rec.fail("init", e)


def patched(c10d: Any) -> dict[str, Callable]:
    """The wrapped set-up functions of ``torch.distributed.distributed_c10d``, by name."""
    wrapped: dict[str, Callable] = {"init_process_group": _wrap_init(c10d.init_process_group)}
    if hasattr(c10d, "new_group"):
        wrapped["new_group"] = _wrap_new_group(c10d.new_group, _group_size)
    # new_subgroups calls new_group for every subgroup (recorded there): no record of its own
    return wrapped
