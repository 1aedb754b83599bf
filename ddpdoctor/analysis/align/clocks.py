"""Whose clocks may be compared: wall times of ranks on one host, never across hosts.

Every rank stamps its records with its own host's wall clock.  Hosts' clocks differ by
whatever NTP left (seconds, sometimes more), so times of ranks on different hosts are
ordered by what the ranks did (collective seq), not by their stamps; a duration measured
on one rank's own clock (how long it waited inside a call) is comparable everywhere.
"""

from __future__ import annotations

from typing import Callable, Iterable, TypeVar

from ddpdoctor.analysis.model import JobView

T = TypeVar("T")


def host_of(job: JobView, rank: int) -> str:
    """The host a rank ran on, from its trace header ("" when unknown)."""
    run = job.ranks.get(rank)
    return str(getattr(run.header, "host", "") or "") if run is not None else ""


def one_host(job: JobView, ranks: Iterable[int]) -> bool:
    """Did these ranks all run on one host (so their wall clocks are one clock)?  Ranks of
    unknown host count as the job's only host when every known rank shares one."""
    hosts = {host_of(job, r) for r in ranks} - {""}
    return len(hosts) <= 1


def same_host(job: JobView, a: int, b: int) -> bool:
    """Can rank ``a``'s timestamps be compared with rank ``b``'s?"""
    return one_host(job, (a, b))


def host_now(job: JobView, rank: int) -> int:
    """"Now" on the rank's own clock: the job's now when every rank shares one host (the
    supervisor's or analyser's host); for a node whose clock skew node 0 measured through
    the store, the job's now plus that skew; else the newest stamp that host wrote."""
    nows = job.__dict__.get("_host_nows")  # computed once per view: reports ask per rank
    if nows is None:
        nows = job.__dict__["_host_nows"] = _host_nows(job)
    return nows.get(host_of(job, rank), job.now_ns)


def _host_nows(job: JobView) -> dict[str, int]:
    if one_host(job, job.ranks):
        return {}
    nows: dict[str, int] = {}
    for r, run in job.ranks.items():
        host = host_of(job, r)
        node = job.nodes.get(host)
        if node is not None and node.skew_ns is not None:
            nows[host] = job.now_ns + node.skew_ns
            continue
        if job.live and job.nodes and host not in job.nodes:
            continue  # node 0's own host, judged live: the job's now is its clock
        stamps = [run.header.heartbeat_ns] + [max(c[-1].t_start, c[-1].t_end)
                                              for c in run.calls.values() if c]
        nows[host] = max([nows.get(host, 0)] + stamps)
    return nows


def ordered(job: JobView, items: Iterable[T], rank_of: Callable[[T], int],
            time_of: Callable[[T], int | None], seq_of: Callable[[T], int | None]) -> list[T]:
    """``items`` (one per rank event) oldest first: by wall time when all their ranks share a
    host, else by how far each rank had got (its collective seq), then by rank."""
    items = list(items)
    if one_host(job, (rank_of(i) for i in items)):
        return sorted(items, key=lambda i: (time_of(i) or 0, rank_of(i)))
    return sorted(items, key=lambda i: (_seq(seq_of(i)), rank_of(i)))


def _seq(seq: int | None) -> int:
    return seq if seq is not None else -1
