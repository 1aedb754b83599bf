"""A model changed on some ranks only (a parameter frozen, a module added): DDP's ranks then
disagree on the parameters they all-reduce."""

from __future__ import annotations

from ddpdoctor.lint.findings import Severity
from ddpdoctor.lint.rules import Draft

KIND = "rank_dependent_model"
MODEL_CHANGES = frozenset({"requires_grad_", "register_parameter", "add_module",
                           "register_module"})
MESSAGE = ("{what} under the rank-dependent condition on line {cond}: the ranks' models differ, "
           "and DDP's gradient all-reduces no longer match")
FIX = "change the model the same way on every rank (decide on rank 0 and broadcast the choice)"


def check(line: int, what: str, cond_line: int) -> Draft:
    """Rule: a model's parameters must be the same on every rank, so a change to them
    (``requires_grad_``, a new module) must not depend on the rank."""
    return Draft(KIND, Severity.ERROR, line, what, cond_line,
                 MESSAGE.format(what=what, cond=cond_line), FIX)
