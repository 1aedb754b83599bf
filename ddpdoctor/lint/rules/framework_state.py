"""Framework state that every rank must agree on, changed on some ranks only: a trainer told to
stop on rank 0 (the others go on into the next collective), a metric logged on one rank while a
checkpoint or early-stopping callback waits for it on every rank."""

from __future__ import annotations

from ddpdoctor.lint.findings import Severity
from ddpdoctor.lint.rules import Draft

STOP_KIND = "rank_dependent_stop"
LOG_KIND = "rank_dependent_log"
STOP_ATTRS = frozenset({"should_stop"})
STOP_MESSAGE = ("`{target}` is set under the rank-dependent condition on line {cond}: only "
                "these ranks leave the loop, and the others wait for them in the next "
                "collective")
STOP_FIX = ("decide together: `trainer.should_stop = trainer.strategy.reduce_boolean_decision("
            "flag, all=False)` on every rank (or broadcast the flag from rank 0)")
LOG_MESSAGE = ("`{call}` logs {key!r}, which {callback} monitors, {where}: the callback's "
               "ranks see different values (or none) and disagree on what to save or when to "
               "stop")
LOG_FIX = ("log the monitored metric on every rank (`self.log(key, value, sync_dist=True)`), "
           "without rank_zero_only and outside rank conditions")


def stop(target: str, line: int, cond_line: int) -> Draft:
    """Rule: a trainer's stop flag set under a rank test stops some ranks only."""
    return Draft(STOP_KIND, Severity.ERROR, line, target, cond_line,
                 STOP_MESSAGE.format(target=target, cond=cond_line), STOP_FIX)


def log(call: str, key: str, callback: str, line: int, cond_line: int | None) -> Draft:
    """Rule: a metric a ModelCheckpoint/EarlyStopping monitors must be logged on every rank."""
    where = (f"under the rank-dependent condition on line {cond_line}" if cond_line is not None
             else "with rank_zero_only=True")
    return Draft(LOG_KIND, Severity.ERROR, line, call, cond_line,
                 LOG_MESSAGE.format(call=call, key=key, callback=callback, where=where),
                 LOG_FIX)
