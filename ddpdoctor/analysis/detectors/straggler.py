"""straggler: one rank reaches collectives consistently later than the others.

For each collective of a group that every member completed, the arrival lag of each rank
is its ``t_start`` minus the earliest ``t_start`` at that seq.  A rank is a straggler when
it arrives last at ``LAST_FRACTION`` of the collectives or more and its median lag is
significant: more than ``MIN_LAG_S`` and more than ``STEP_FRACTION`` of the step time
(the median interval between batches, else between optimizer steps or collectives).
Ranks of one host share a clock, so their ``t_start`` stamps are compared.  A group that
spans hosts is never compared by wall clock (the hosts' skew would read as lag): there a
rank's lag is how much less it waited inside the collective than the rank that waited
longest, each wait measured on the rank's own clock (all members leave a collective
together, so who waited least arrived last).
"""

from __future__ import annotations

import statistics
from typing import Any

from ddpdoctor.analysis.align.clocks import one_host
from ddpdoctor.analysis.model import (NS, Call, Finding, FindingKind, JobView, Severity,
                                      ranks_values)

MIN_COLLECTIVES = 8
LAST_FRACTION = 0.75
MIN_LAG_S = 0.05
STEP_FRACTION = 0.2
WARN_FRACTION = 0.5  # lag above this share of the step: a warning, else info
SKIP_FIRST = 2  # set-up collectives (DDP's parameter broadcast) are not steps


def _step_time(job: JobView, calls: dict[int, dict[int, Call]]) -> float | None:
    """Median seconds per training step, over the ranks."""
    per_rank = []
    for rank, run in job.ranks.items():
        times = sorted(b.t_start for b in run.batches)
        if len(times) >= 3:
            per_rank.append(statistics.median(b - a for a, b in zip(times, times[1:])))
    if per_rank:
        return statistics.median(per_rank) / NS
    spans = []
    for rank, by_seq in calls.items():
        starts = sorted(c.t_start for c in by_seq.values())
        steps = job.ranks[rank].header.step
        if len(starts) >= 2:
            spans.append((starts[-1] - starts[0]) / max(1, steps if steps > 0 else
                                                        len(starts) - 1))
    return statistics.median(spans) / NS if spans else None


def _group_lags(job: JobView, group: str) -> tuple[dict[int, list[float]], dict[int, int],
                                                    int, dict[int, dict[int, Call]]]:
    """Per rank: arrival lags (s) over the common seqs, and how often it came last."""
    members = [r for r in job.group_members(group) if r in job.ranks]
    calls = {r: {c.seq: c for c in job.ranks[r].calls.get(group, []) if not c.open}
             for r in members}
    common = set.intersection(*(set(c) for c in calls.values())) if calls else set()
    seqs = sorted(common)[SKIP_FIRST:]
    lags: dict[int, list[float]] = {r: [] for r in members}
    last: dict[int, int] = {r: 0 for r in members}
    by_clock = one_host(job, members)
    for seq in seqs:
        arrivals = {r: _arrival(calls[r][seq], by_clock) for r in members}
        t0 = min(arrivals.values())
        for r, t in arrivals.items():
            lags[r].append((t - t0) / NS)
        last[max(arrivals, key=arrivals.__getitem__)] += 1
    return lags, last, len(seqs), calls


def _arrival(call: Call, by_clock: bool) -> int:
    """When the rank arrived: its wall-clock start on a shared clock, else minus how long
    it waited inside (later arrival, shorter wait), both in ns."""
    return call.t_start if by_clock else -(call.t_end - call.t_start)


def detect(job: JobView) -> list[Finding]:
    if len(job.ranks) < 2:
        return []
    findings = []
    for group in job.groups():
        members = [r for r in job.group_members(group) if r in job.ranks]
        if len(members) < 2:
            continue
        lags, last, n, calls = _group_lags(job, group)
        if n < MIN_COLLECTIVES:
            continue
        rank = max(last, key=last.__getitem__)
        if last[rank] < LAST_FRACTION * n:
            continue
        lag = statistics.median(lags[rank])
        step = _step_time(job, calls)
        if lag < MIN_LAG_S or (step is not None and lag < STEP_FRACTION * step):
            continue
        findings.append(_finding(group, rank, lag, step, last[rank], n, lags))
        break  # the default group tells it; subgroups would repeat it
    return findings


def _finding(group: str, rank: int, lag: float, step: float | None, last: int, n: int,
             lags: dict[int, list[float]]) -> Finding:
    share = f", {lag / step:.0%} of a {step * 1000:.0f} ms step" if step else ""
    summary = (f"rank {rank} reaches collectives {lag * 1000:.0f} ms after the first rank "
               f"(median{share}); it arrived last at {last} of {n} collectives")
    detail = ("The other ranks wait for it in every collective: the job runs "
              f"at rank {rank}'s pace.\nMedian arrival lag per rank: " + ranks_values(
                  {r: f"{statistics.median(v) * 1000:.1f} ms" for r, v in lags.items()}) + ".")
    fix = (f"Find what makes rank {rank} slower: its data loading (more samples, slow "
           "storage, fewer workers), extra work only it does (logging, checkpointing, "
           "evaluation on rank 0), or a slower device/host; balance the work or move the "
           "extra work off the training loop.")
    severity = Severity.WARNING if step and lag >= WARN_FRACTION * step else Severity.INFO
    evidence: dict[str, Any] = {
        "group": group, "rank": rank, "median_lag_s": round(lag, 4),
        "step_s": round(step, 4) if step else None, "last_count": last, "collectives": n,
        "median_lag_by_rank": {str(r): round(statistics.median(v), 4)
                               for r, v in sorted(lags.items())}}
    return Finding(FindingKind.STRAGGLER, severity, (rank,), None, summary, detail, fix, evidence)
