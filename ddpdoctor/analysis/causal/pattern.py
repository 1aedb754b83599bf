"""Does a rank's newest call break the repeating pattern of its own earlier calls?"""

from __future__ import annotations

from typing import Hashable, Sequence

from ddpdoctor.analysis.model import Call, RankRun


def breaks_pattern(keys: Sequence[Hashable]) -> bool | None:
    """``keys`` in call order, the last one the call in question: True when, every earlier
    time the rank made the call before it, it went on to something else; None when the
    history says nothing (no earlier occurrence of the preceding call)."""
    if len(keys) < 3:
        return None
    prev, now = keys[-2], keys[-1]
    after = {keys[i + 1] for i in range(len(keys) - 2) if keys[i] == prev}
    if not after:
        return None
    return now not in after


def call_key(call: Call) -> tuple[str, str]:
    return (call.op, call.callsite)


def stream_until(run: RankRun, call: Call, group: str | None = None) -> list[tuple[str, str]]:
    """The rank's calls (on ``group``, else on every group) in order, up to ``call``."""
    if group is not None:
        calls = [c for c in run.calls.get(group, []) if c.seq <= call.seq]
    else:
        calls = sorted((c for cs in run.calls.values() for c in cs
                        if c.t_start <= call.t_start), key=lambda c: c.t_start)
    return [call_key(c) for c in calls]
