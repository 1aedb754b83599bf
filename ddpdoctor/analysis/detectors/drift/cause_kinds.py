"""The causes of replica drift, as words: each kind of cause, its fix, its few-word summary,
and one cause as the checks saw it (ranks, parameters, the user's line)."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Any

from ddpdoctor.analysis.load.user_source import source_line
from ddpdoctor.analysis.model import ranks_text


class CauseKind(str, enum.Enum):
    """What made the replicas differ, in the order a cause is preferred as the likely one."""

    WRITE = "write"  # load_state_dict / torch.nn.init on some ranks after construction
    REQUIRES_GRAD = "requires_grad"  # changed after construction
    ACCUMULATED_TWICE = "accumulated_twice"  # a gradient added after its bucket was reduced
    UNSYNCED = "unsynced"  # ranks ran different numbers of synced backward passes
    SKIPPED_STEP = "skipped_step"  # a rank skipped an optimizer step after a synced backward
    NO_GRADIENT = "no_gradient"  # in no bucket on some ranks
    SCHEDULER = "scheduler"  # LR scheduler stepped a different number of times
    HYPERPARAMETERS = "hyperparameters"  # optimizer settings differ
    GRAD_SCALE = "grad_scale"  # a GradScaler's scale differs: each rank unscales by its own
    GRADIENT_CHANGED = "gradient_changed"  # the averaged gradient changed before the step
    WRITTEN_IN_PLACE = "written_in_place"  # in-place writes outside the optimizer
    UNKNOWN = "unknown"


FIXES = {
    CauseKind.WRITE: "Load checkpoints and re-initialise layers on every rank alike, before "
                     "wrapping the model in DDP (DDP copies rank 0's parameters to every rank "
                     "only when it is built); to load later, load on every rank (or load on "
                     "rank 0 and broadcast each parameter with dist.broadcast).",
    CauseKind.REQUIRES_GRAD: "Freeze or unfreeze parameters on every rank alike and before "
                             "building DDP; to change them during training, change them on "
                             "every rank and build a new DDP around the module.",
    CauseKind.ACCUMULATED_TWICE: "Use torch.utils.checkpoint.checkpoint(..., "
                                 "use_reentrant=False) (or DDP(..., static_graph=True)): a "
                                 "reentrant checkpoint runs a nested backward that adds to "
                                 "the gradient after DDP averaged it; and call backward once "
                                 "per forward.",
    CauseKind.UNSYNCED: "Run the synced backward (the one outside no_sync()) on every rank "
                        "in every step: when a micro-batch fails on one rank, decide together "
                        "(all-reduce a 'skip' flag) and skip it on every rank, or run it with "
                        "its loss weighted by zero.",
    CauseKind.NO_GRADIENT: "Give every parameter a gradient on every rank in every step (use "
                           "it in forward on every rank, weighted by zero if need be), or "
                           "build DDP with find_unused_parameters=True.",
    CauseKind.SCHEDULER: "Step the LR scheduler on every rank, once per optimizer step; keep "
                         "only logging and saving under `if rank == 0`.",
    CauseKind.HYPERPARAMETERS: "Set the optimizer's settings (lr, weight_decay, momentum, "
                               "...) the same on every rank: decide them on rank 0 and "
                               "broadcast them, or compute them from values every rank "
                               "shares.",
    CauseKind.GRAD_SCALE: "Keep one GradScaler state on every rank: after an uneven epoch "
                          "(Join), broadcast the scaler's state_dict from the rank that ran "
                          "the most steps and load it on every rank; skip steps on every "
                          "rank alike.",
    CauseKind.SKIPPED_STEP: "Decide to skip an optimizer step together: all-reduce the skip "
                            "flag (MAX) so that every rank skips, or none.",
    CauseKind.GRADIENT_CHANGED: "Change gradients the same way on every rank, after backward: "
                                "clip with torch.nn.utils.clip_grad_norm_ on the averaged "
                                "gradients with a max_norm every rank shares (not one from the "
                                "rank's own loss or data), and edit gradients on every rank or "
                                "on none.",
    CauseKind.WRITTEN_IN_PLACE: "Write to parameters outside the optimizer on every rank alike "
                                "(or on none); a write on some ranks makes their replicas "
                                "differ for the rest of the run.",
    CauseKind.UNKNOWN: "Compare what each rank runs between the two checks: anything that "
                       "changes parameters, gradients or optimizer settings on some ranks "
                       "only.",
}


SHORT = {
    CauseKind.WRITE: "{ranks} loaded or re-initialised {params} after DDP was built",
    CauseKind.REQUIRES_GRAD: "requires_grad of {params} changed after DDP was built",
    CauseKind.ACCUMULATED_TWICE: "the gradient of {params} was accumulated after DDP averaged "
                                 "it (reentrant checkpoint)",
    CauseKind.UNSYNCED: "{ranks} ran a different number of synced backward passes (DDP "
                        "averaged gradients of different steps)",
    CauseKind.NO_GRADIENT: "{params} had no gradient on {ranks}",
    CauseKind.SCHEDULER: "the LR scheduler was stepped on {ranks} only",
    CauseKind.HYPERPARAMETERS: "optimizer settings differ between ranks",
    CauseKind.GRAD_SCALE: "the GradScaler's scale differs between ranks",
    CauseKind.SKIPPED_STEP: "{ranks} skipped an optimizer step the others took",
    CauseKind.GRADIENT_CHANGED: "gradients changed between backward and the step (per-rank "
                                "clipping or edit)",
    CauseKind.WRITTEN_IN_PLACE: "{params} written outside the optimizer on {ranks}",
    CauseKind.UNKNOWN: "not seen",
}


@dataclass(frozen=True)
class Cause:
    """One cause seen: ``ranks`` where it was seen, ``params`` it concerns, ``text`` in the
    user's words, ``site`` the user's file:line where known."""

    kind: CauseKind
    ranks: tuple[int, ...]
    params: tuple[str, ...]
    text: str
    site: str = ""

    @property
    def short(self) -> str:
        """The cause in a few words, for the finding's summary."""
        text = SHORT[self.kind].format(ranks=ranks_text(self.ranks),
                                       params=listed(self.params, 2))
        if self.site and self.kind in (CauseKind.SCHEDULER, CauseKind.HYPERPARAMETERS,
                                       CauseKind.GRAD_SCALE):
            path, _, line = self.site.rpartition(":")
            text += f" ({os.path.basename(path)}:{line})"
        return text

    @property
    def fix(self) -> str:
        return FIXES[self.kind]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "ranks": list(self.ranks), "parameters":
                list(self.params), "site": self.site, "text": self.text}


def short_site(site: str) -> str:
    """``train.py:42 `model.load_state_dict(sd)``` from a full path's site."""
    if not site:
        return ""
    path, _, line = site.rpartition(":")
    src = source_line(site)
    return f"{os.path.basename(path)}:{line}" + (f" `{src}`" if src else "")


def listed(names: tuple[str, ...] | list[str], most: int = 3) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
