"""A model's parameters or its optimizer's settings changed on some ranks after DDP's
construction: DDP broadcast the parameters once, at construction; from then on the replicas
drift apart and train different models, silently."""

from __future__ import annotations

from ddpdoctor.lint.findings import Severity
from ddpdoctor.lint.rules import Draft

KIND = "replica_drift"
PARAM_METHODS = frozenset({"reset_parameters", "load_state_dict", "copy_", "fill_", "zero_",
                           "normal_", "uniform_", "requires_grad_"})
OPTIMIZER_KEYS = frozenset({"lr", "weight_decay", "momentum", "betas", "eps", "initial_lr"})
MESSAGE = ("{what} under the rank-dependent condition on line {cond}, after the model was "
           "wrapped in DDP: DDP broadcast the parameters once, at construction, so from here "
           "the ranks' replicas differ and train different models")
FIX = ("make the change on every rank (or before wrapping the model in DDP, which then "
       "broadcasts rank 0's parameters)")


def check(what: str, line: int, cond_line: int) -> Draft:
    """Rule: after DDP's construction, parameters and optimizer settings change on every rank
    or on none."""
    return Draft(KIND, Severity.ERROR, line, what, cond_line,
                 MESSAGE.format(what=what, cond=cond_line), FIX)
