"""Known failures of torch, gloo or the launcher themselves: a small typed table matched on
structured facts (where the rank was, the attempt, the error class, a short stable fragment
of torch's message), each entry with its upstream issue and the workaround."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from ddpdoctor.analysis.causal.state import RankState, StateKind
from ddpdoctor.analysis.model import JobView, RankRun
from ddpdoctor.trace import layout as L

ATTEMPT_DIR = re.compile(r"attempt-(\d+)")


class Place(str, enum.Enum):
    """Where the rank was when it failed."""

    RENDEZVOUS = "rendezvous"  # inside init_process_group / new_group (the store)
    COLLECTIVE = "collective"  # inside a collective or p2p call
    TEARDOWN = "teardown"  # after its last call: destroy_process_group or interpreter exit


@dataclass(frozen=True)
class FailureFacts:
    """What is known of one rank's failure, as the table matches it."""

    place: Place | None
    attempt: int  # torchrun's restart count (0: the first attempt)
    error_class: str  # the exception's class name ("" for a signal)
    message: str  # the exception's message, or the fault dump after a signal
    signal: str | None
    every_rank_inside: bool  # every rank of the job inside the same call when it failed


@dataclass(frozen=True)
class KnownFailure:
    """One known failure.  ``fragment`` is a short stable part of torch's (or gloo's)
    message, searched, never the whole text; ``error_classes`` empty: any (or a signal)."""

    id: str
    title: str
    upstream: str
    workaround: str
    place: Place
    fragment: re.Pattern[str]
    error_classes: tuple[str, ...] = ()
    signal: str | None = None
    min_attempt: int = 0
    every_rank_inside: bool = False
    verified: str = ""

    def matches(self, f: FailureFacts) -> bool:
        return (f.place == self.place and f.attempt >= self.min_attempt and
                (not self.error_classes or f.error_class in self.error_classes) and
                (self.signal is None or f.signal == self.signal) and
                (not self.every_rank_inside or f.every_rank_inside) and
                bool(self.fragment.search(f.message)))


TABLE: tuple[KnownFailure, ...] = (
    KnownFailure(
        "store_port_in_use",
        "the rendezvous port is taken: rank 0 cannot host the TCPStore",
        "pytorch/pytorch#73320 (c10d's default MASTER_PORT 29500 taken by another job on the "
        "host), pytorch/pytorch#85604",
        "Give each job a free port: torchrun --standalone or --rdzv-endpoint localhost:0 picks "
        "one; or set MASTER_PORT to a free port. `ss -ltnp 'sport = :PORT'` shows which "
        "process holds it (often a previous run that has not exited).",
        Place.RENDEZVOUS, re.compile(r"name: EADDRINUSE|errno: 98 - Address already in use"),
        ("DistNetworkError", "RuntimeError"),
        verified="sample_bugs/store_port_taken.py: a listener on MASTER_PORT makes rank 0's "
                 "init_process_group raise DistNetworkError (torch 2.13, gloo)"),
    KnownFailure(
        "restart_refused_at_init",
        "a restarted attempt is refused by the store in init_process_group",
        "torch elastic restarts sharing the rendezvous TCPStore: a new attempt can meet the "
        "previous attempt's keys or its closing connections (pytorch/pytorch#135712, "
        "#167288)",
        "Set TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 for the job (init_process_group then gets "
        "a store of its own each attempt), and give init_process_group a timeout so that a "
        "refused attempt fails fast and torchrun restarts it again.",
        Place.RENDEZVOUS,
        re.compile(r"Connection (reset by peer|refused)|Socket Timeout|Broken pipe"),
        ("DistNetworkError", "DistStoreError", "RuntimeError"), min_attempt=1),
    KnownFailure(
        "gloo_teardown_abort",
        "gloo aborts the process at exit after every collective completed",
        "torch 2.13 gloo: a worker thread frees finished work while the interpreter "
        "finalizes (pytorch/pytorch pull request 179291)",
        "Call dist.barrier() and dist.destroy_process_group() before the rank's function "
        "returns, and wait on every async handle; under `ddpdoctor run` the destroyed groups "
        "are kept until the rank's exit handlers ran, which avoids it.",
        Place.TEARDOWN, re.compile(r"terminate called without an active exception|"
                                   r"Fatal Python error: Aborted"),
        signal="SIGABRT",
        verified="torch 2.13, gloo: 2 of 9 runs of a three-rank job under load (README, "
                 "Exiting)"),
    KnownFailure(
        "collective_timeout_all_inside",
        "every rank was inside the same collective and it timed out",
        "gloo/NCCL collective timeouts with no rank missing: the transport is slow or "
        "goes the wrong way (not a rank's code)",
        "Nothing in the ranks' code differs: raise init_process_group(timeout=...) for large "
        "collectives, and check the transport (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME pick "
        "the interface; a firewall between the hosts stalls it).",
        Place.COLLECTIVE,
        re.compile(r"Timed out waiting \d+ms for|Watchdog caught collective operation timeout"),
        ("RuntimeError", "DistBackendError"), every_rank_inside=True),
)


def attempt_of(job: JobView) -> int:
    """torchrun's attempt of this job's traces (their run dir is RUN_DIR/attempt-K)."""
    found = [int(m.group(1)) for d in job.run_dirs if (m := ATTEMPT_DIR.fullmatch(d.name))]
    return max(found, default=0)


def _place(s: RankState, run: RankRun) -> Place | None:
    """Where a rank that failed was: a failed rank's ``call`` is the call it failed in."""
    if s.death is not None and s.death.teardown:
        return Place.TEARDOWN
    if s.call is not None:
        return Place.COLLECTIVE
    marks = [m for m in run.marks if m.op in ("init", "new_group")]
    if marks and (marks[-1].open or bool(marks[-1].flags & L.RecordFlag.FAILED)):
        return Place.RENDEZVOUS
    return None


def facts_of(job: JobView, states: dict[int, RankState], rank: int) -> FailureFacts | None:
    """The facts of ``rank``'s failure, or None when it did not fail."""
    s = states.get(rank)
    run = job.ranks.get(rank)
    if s is None or s.death is None or run is None:
        return None
    exc = run.exception() or {}
    message = str(exc.get("message") or "") or run.fault
    place = _place(s, run)
    inside = {(o.call.group, o.call.seq) for o in states.values() if o.call is not None and
              o.kind in (StateKind.PEER_FAILED, StateKind.BLOCKED)}
    every = len(inside) == 1 and all(o.call is not None for o in states.values())
    return FailureFacts(place, attempt_of(job), str(exc.get("type") or ""), message,
                        s.death.signal, every)


def match(job: JobView, states: dict[int, RankState], rank: int) -> KnownFailure | None:
    """The known failure that ``rank``'s failure is, if any."""
    facts = facts_of(job, states, rank)
    if facts is None:
        return None
    return next((k for k in TABLE if k.matches(facts)), None)


def evidence(k: KnownFailure) -> dict[str, str]:
    return {"known_failure": k.id, "upstream": k.upstream, "workaround": k.workaround}
