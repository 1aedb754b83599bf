"""What a call that the user never wrote does, per origin (DDP's forward and backward, a
framework's helper), and the fix when such a call is the one that differs."""

from __future__ import annotations

from ddpdoctor.analysis.model import Call
from ddpdoctor.trace.origin import Origin

# Per origin: (what the call does that the user may not know, the fix).
MECHANISMS: dict[Origin, tuple[str, str]] = {
    Origin.DDP_FORWARD: (
        "calling the DDP model is a collective: its forward broadcasts the module's buffers "
        "from rank 0 (broadcast_buffers=True) and, once after the first backward, the "
        "rebuilt order of the gradient buckets, so every rank must call it the same number "
        "of times",
        "Evaluate on `model.module` (the wrapped module: no collective) or call the DDP model "
        "on every rank; DDP(..., broadcast_buffers=False) also drops the broadcast."),
    Origin.DDP_BACKWARD: (
        "backward() through a DDP model all-reduces the gradients bucket by bucket, so every "
        "rank must run backward the same number of times",
        "Run forward and backward on every rank every step: to skip a step, decide on one "
        "rank and broadcast the decision (or all-reduce the flag) and skip together, or "
        "zero the loss instead of skipping."),
    Origin.DDP_INIT: (
        "DDP's constructor is a collective: it checks the parameters' shapes across ranks "
        "and broadcasts rank 0's parameters and buffers",
        "Construct DistributedDataParallel on every rank, with the same model, at the same "
        "point relative to other collectives."),
    Origin.ZERO: (
        "ZeroRedundancyOptimizer broadcasts every rank's shard (consolidate_state_dict, "
        "step): it is a collective",
        "Call optimizer.consolidate_state_dict(to=0) on every rank, then save on rank 0 only."),
    Origin.SYNC_BN: (
        "SyncBatchNorm all-gathers the batch statistics in every training-mode forward",
        "Run the forward on every rank, or evaluate in eval mode (model.eval(): running "
        "statistics, no collective) or on `model.module`."),
    Origin.OBJECT: (
        "an object collective is two collectives under one call: it sends the pickled sizes "
        "first, then the bytes",
        "Call the object collective on every rank of the group, with the same src."),
    Origin.JOIN: (
        "torch's Join context shadows the collectives of ranks that ran out of inputs with "
        "all-reduces of its own, which only match DDP's and ZeRO's collectives",
        "Pass every DDP model and ZeroRedundancyOptimizer to Join(...), and keep "
        "collectives of your own out of the joined loop (Join does not shadow them)."),
    Origin.FRAMEWORK: (
        "the framework's helper issues a collective (a metric sync, gather or barrier)",
        "Call the helper on every rank; keep only the printing or saving under the rank "
        "check."),
}


def fix_for(call: Call) -> str | None:
    """The fix of a call made by an API on the user's behalf (None: no such origin)."""
    words = MECHANISMS.get(call.origin)
    return words[1] if words else None
