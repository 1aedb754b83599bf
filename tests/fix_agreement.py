"""Does a finding's `Fix:` line follow the cause the finding states?  One rule set, used on
the trace factory's jobs (tests/unit) and on every catalogued bug's report (integration)."""

from __future__ import annotations

import re
from typing import Any

_SITE = re.compile(r"[\w.-]+\.py:\d+")
_ORIGIN_FIX = {"Run forward and backward": "ddp_backward",
               "Evaluate on `model.module`": "ddp_forward",
               "Construct DistributedDataParallel": "ddp_init"}


def disagreement(f: dict[str, Any]) -> str | None:
    """Why ``f``'s fix contradicts the finding (a report's finding as a dict), or None."""
    ev = f.get("evidence") or {}
    fix, told = f["fix"], f["summary"] + "\n" + f["detail"]
    cause = ev.get("why") or {}
    decided = ev.get("loop_exit") or ev.get("skipped_iteration") or cause.get("decision")
    if decided and (cause.get("call") or not cause) and not fix.startswith("Decide together"):
        return "a rank decided alone, yet the fix is not about deciding together"
    if cause.get("kind") == "rank_branch" and not (
            (cause.get("condition") or "") in fix or "every rank" in fix):
        return "a rank-dependent branch, yet the fix does not speak of it"
    if cause.get("kind") == "shape" and "size" not in fix:
        return "only a shape differs, yet the fix is not about sizes"
    if cause.get("kind") == "dtype" and "dtype" not in fix:
        return "only a dtype differs, yet the fix is not about dtypes"
    for site in _SITE.findall(fix):
        if site not in told:
            return f"the fix names {site}, which the finding does not"
    calls = ev.get("calls") or {}
    culprits = [calls[str(r)] for r in f["ranks"] if str(r) in calls]
    for words, origin in _ORIGIN_FIX.items():
        if words in fix and culprits and cause.get("kind") != "rank_branch" and \
                all(c.get("origin") != origin for c in culprits):
            return f"the fix is about {origin}, a call no culprit made"
    return None
