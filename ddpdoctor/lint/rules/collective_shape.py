"""A collective whose tensor has a shape that depends on the rank or on rank-local data: the
ranks send buffers of different sizes (a hang, a size error, or silently wrong sums)."""

from __future__ import annotations

from ddpdoctor.lint.rules import Draft, because, severity_of
from ddpdoctor.lint.taint import Taint, TaintKind

RANK_KIND = "rank_dependent_shape"
OTHER_KIND = "uneven_shape"
# collectives whose tensor must have the same shape on every rank: op -> index of the tensor
SHAPED = {"all_reduce": 0, "reduce": 0, "all_gather": 1, "all_gather_into_tensor": 1,
          "reduce_scatter_tensor": 1, "all_reduce_coalesced": 0}
MESSAGE = ("{op} of `{name}`, whose shape depends on {why}: the ranks pass tensors of "
           "different sizes")
FIX = ("give the tensor the same shape on every rank: all-reduce the lengths with MAX first and "
       "pad to it (or use all_gather_object for ragged data)")


def check(op: str, name: str, line: int, shape: Taint) -> Draft:
    """Rule: the tensor of an all-reduce or all-gather must have one shape on every rank."""
    kind = RANK_KIND if shape.kind == TaintKind.RANK else OTHER_KIND
    return Draft(kind, severity_of(shape), line, op, None,
                 MESSAGE.format(op=op, name=name, why=because(shape)), FIX)
