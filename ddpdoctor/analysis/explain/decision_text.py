"""The words of a finding decided from the ranks' recorded decision: the lead that names
the line and each side, the mechanism in one sentence, and the fix that follows from it."""

from __future__ import annotations

from ddpdoctor.analysis.explain.recorded import RecordedDecision
from ddpdoctor.analysis.model import ranks_text

RULES = {
    "majority": "its decision differs from the other ranks'",
    "history": "it decided differently from its own earlier steps there",
    "branch": "its branch holds the collective the others never make",
    "no_majority": "no majority tells which side is wrong: every side is named",
}


def lead(d: RecordedDecision) -> str:
    """``the ranks' paths parted at train.py:13 `if os.path.exists(state_path):` (rank 0:
    true ...; rank 1: false ...)``."""
    return f"the ranks decided differently at {d.where} `{d.source}` ({d.text()})"


def why(d: RecordedDecision, culprits: tuple[int, ...], rule: str) -> str:
    """The mechanism, in one sentence, without repeating the sides the lead gives: where
    the decision took the ranks, and why these ranks are named."""
    parted = ""
    if d.parted_at is not None:
        file, line, source = d.parted_at
        parted = (f"The value it set drove `{source}` at {file.rsplit('/', 1)[-1]}:{line}, "
                  "where the ranks' collectives went apart. ")
    who = ranks_text(culprits)
    return (f"{parted}{who[0].upper()}{who[1:]} {'is' if len(culprits) == 1 else 'are'} "
            f"named because {RULES.get(rule, rule)}.")


def fix(d: RecordedDecision, rule: str, collective: str = "") -> str:
    """The fix that follows from the decision: decide it together, or take the collective
    out of the one-sided branch."""
    read = sorted({k for o in d.ranks.values() for k in o.values})
    differing = [k for k in read if len({o.values.get(k) for o in d.ranks.values()}) > 1]
    inputs = f" (they read different {', '.join(f'`{k}`' for k in differing)})" \
        if differing else ""
    if rule == "branch" and collective:
        return (f"The {collective} runs only on the side of {d.where} `{d.source}` that one "
                "rank took: call it on every rank of the group (keep only the rank-specific "
                "work under the condition), or on none.")
    return (f"Decide together at {d.where} `{d.source}`{inputs}: let one rank compute the "
            "outcome and broadcast it (or all-reduce the inputs), so that every rank takes "
            "the same way and makes the same collectives.")


def loop_fix(loops: dict, bound: float) -> str:
    """The fix for ranks turning in a loop the others wait on: make what it waits for
    happen, bound the loop, or wait with a collective."""
    r, lp = sorted(loops.items())[0]
    where = f"{lp.file.rsplit('/', 1)[-1]}:{lp.line}"
    return (f"{ranks_text(sorted(loops)).capitalize()} turns in `{lp.source}` at {where} until its "
            f"condition changes, and it had not changed after {bound:g} s while the others "
            "waited: make sure what it waits for happens on every path (which rank makes it?), "
            "give the loop a deadline that raises, or wait with a collective every rank "
            "enters (a barrier after the rank that makes it) instead of polling.")
