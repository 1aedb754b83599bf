"""Each class of bug the causal model must get right, in more than one shape: the catalogue's
scripts run at another world size (two ranks, one against one, where the catalogue has three
or four; four where it has two), so that a rule fitted to one majority, one ending or one
world size shows.  Used by test_shapes.py and by the five-run stability check
(``python -m tests.stability``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ddpdoctor import bugs


@dataclass(frozen=True)
class Shape:
    """``bug``'s script at ``nproc`` ranks: the first error must blame ``culprits``.

    ends: how the culprit's side ends (``waits`` in a later collective, ``exits``, ``raises``,
    ``aborts``, ``finishes``: slow, and healthy)."""

    bug: str
    nproc: int
    culprits: tuple[int, ...]
    ends: str

    @property
    def name(self) -> str:
        return f"{self.bug}_{self.nproc}ranks"


SHAPES: tuple[Shape, ...] = (  # in the suite: one shape a class at the other world size
    Shape("frozen_on_one_rank", 2, (1,), "raises"),  # one against one: no majority
    Shape("all_to_all_split_own_data", 4, (0,), "aborts"),
    Shape("time_budget_exit", 4, (1,), "exits"),
    Shape("sampler_seed_per_rank", 4, (0, 1, 2, 3), "finishes"),
)
MORE_SHAPES: tuple[Shape, ...] = (  # the stability check's too (the suite has their class)
    Shape("no_sync_token_count", 4, (1,), "waits"),
    Shape("dtensor_full_tensor_rank0", 4, (0,), "waits"),
    Shape("early_stop_closing_barrier", 4, (1,), "waits"),
    Shape("checkpoint_on_own_clock", 2, (1,), "waits"),
    Shape("nan_loss_skip_one_rank", 4, (1,), "waits"),
    Shape("busy_straggler_finishes", 4, (1,), "finishes"),
)


def shape_bug(shape: Shape) -> bugs.Bug:
    """The catalogue entry of ``shape``'s bug, at its world size and with its culprits."""
    return replace(bugs.find_bug(shape.bug), name=shape.name, nproc=shape.nproc,
                   culprit_ranks=shape.culprits)
