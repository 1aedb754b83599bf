"""Typed per-rank state of the causal model: what each rank is doing, or how it ended."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ddpdoctor.analysis.model import Call


class StateKind(str, enum.Enum):
    """What a rank is doing at the moment the job is judged."""

    BLOCKED = "blocked"  # inside a collective or p2p call that has not returned
    RENDEZVOUS = "rendezvous"  # inside init_process_group / new_group
    COMPUTING = "computing"  # running its own code (user frame from the stack)
    DATA_LOADING = "data_loading"  # inside a DataLoader's __next__ / fetch
    OS_BLOCKED = "os_blocked"  # outside any call, no CPU: in a lock, a read, a sleep (/proc)
    NOT_ARRIVED = "not_arrived"  # no trace, or started without entering init_process_group
    EXITED = "exited"  # returned cleanly
    DIED = "died"  # killed by a signal or its own exception
    PEER_FAILED = "peer_failed"  # raised because a peer was absent (closed, timeout, abort)
    STOPPED = "stopped"  # SIGSTOPped
    UNREACHABLE = "unreachable"  # on a node that was lost: last seen state is stale
    UNSEEN = "unseen"  # outside any call, known from flight recorder dumps alone: no process,
    # no stack, nothing tells where it is


@dataclass(frozen=True)
class Death:
    """How a rank ended badly: ``cause`` quotes its last words in one line.

    peer_absence: the error was raised by a peer's absence (connection closed or reset by
    peer, a gloo/NCCL timeout, the watchdog's abort while waiting).  teardown: it died in
    destroy_process_group or at interpreter exit after its collectives completed.
    left_early: it died on its way out (destroy_process_group, interpreter exit) while its
    peers still called collectives: it left early, and the abort is how it left.
    last_op: in teardown, the op of its last completed collective ("" when none).
    """

    cause: str
    at_ns: int
    where: str
    detail: str
    signal: str | None = None
    peer_absence: bool = False
    teardown: bool = False
    left_early: bool = False
    last_op: str = ""


@dataclass(frozen=True)
class RankState:
    """One rank's state.  ``call`` is the call it is blocked (or failed) in, else its last
    call; ``frame`` is the innermost user frame (``path:line``) of its stack."""

    rank: int
    kind: StateKind
    call: Call | None = None
    since_ns: int | None = None
    mark: str = ""  # "init" or "new_group" while in the rendezvous
    mark_count: int = 0  # new_group calls this rank has entered
    frame: str | None = None
    frame_name: str = ""
    cpu_busy: bool | None = None
    progress_ns: int | None = None
    death: Death | None = None
    steps: int = 0  # optimizer steps (DDP step counter)
    blocked_on: str = ""  # what the OS says an idle rank waits in ("flock", "futex", ...)
    blocked_meaning: str = ""  # that, in a few words ("a file lock")
    blocked_by: int | None = None  # the rank holding the lock it waits for, where known
