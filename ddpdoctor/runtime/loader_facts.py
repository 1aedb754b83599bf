"""What identifies a DataLoader across ranks (how it was built, where it is iterated)
and the facts of one of its epochs that the data probes record."""

from __future__ import annotations

import os
import sys
import zlib
from typing import Any


def _sampler_of(loader: Any) -> Any:
    bs = getattr(loader, "batch_sampler", None)
    sampler = getattr(bs, "sampler", None) if bs is not None else None
    return sampler if sampler is not None else getattr(loader, "sampler", None)


def _shuffles(sampler: Any) -> bool | None:
    """Does the sampler mean to shuffle?  None: cannot be told."""
    from torch.utils.data import RandomSampler, SequentialSampler

    if isinstance(sampler, RandomSampler):
        return True
    if isinstance(sampler, SequentialSampler):
        return False
    value = getattr(sampler, "shuffle", None)
    return value if isinstance(value, bool) else None


def _predicted_length(loader: Any) -> int | None:
    """len(loader) where defined, without the side effect DataLoader.__len__ has on
    iterable datasets (it arms a warning)."""
    from torch.utils.data import IterableDataset

    try:
        if isinstance(loader.dataset, IterableDataset):
            n = len(loader.dataset)  # type: ignore[arg-type]
            bs = loader.batch_size
            if bs is None:
                return int(n)
            return int(n // bs if loader.drop_last else -(-n // bs))
        return int(len(loader._index_sampler))
    except (TypeError, NotImplementedError, AttributeError, ValueError):
        return None


def _static_facts(loader: Any) -> dict[str, Any]:
    """The facts of a loader that stay the same from epoch to epoch (computed once and
    kept on the loader: a DataLoader forbids changing them after construction)."""
    facts = loader.__dict__.get("_ddpdoctor_facts")
    if facts is not None:
        return facts
    from torch.utils.data import DistributedSampler, IterableDataset

    sampler = _sampler_of(loader)
    dataset = loader.dataset
    facts = {
        "batch_size": loader.batch_size, "drop_last": bool(loader.drop_last),
        "iterable": isinstance(dataset, IterableDataset),
        "dataset": type(dataset).__name__, "sampler": type(sampler).__name__
        if sampler is not None else None, "shuffle": _shuffles(sampler),
        "num_workers": loader.num_workers,
    }
    facts["_distributed"] = isinstance(sampler, DistributedSampler)
    loader.__dict__["_ddpdoctor_facts"] = facts
    return facts


def epoch_facts(loader: Any, it: Any, loader_id: int, epoch: int, steps: int) -> dict[str, Any]:
    """What the ``loader_epoch`` event says of one iteration of a loader."""
    static = _static_facts(loader)
    sampler = _sampler_of(loader)
    facts: dict[str, Any] = {"loader": loader_id, "epoch": epoch,
                             "length": _predicted_length(loader), "steps": steps}
    facts.update(static)
    del facts["_distributed"]
    try:
        facts["samples"] = len(sampler) if sampler is not None and not static["iterable"] \
            else len(loader.dataset)
    except (TypeError, NotImplementedError):
        facts["samples"] = None
    if static["_distributed"]:
        facts["sampler_epoch"] = sampler.epoch
        facts["sampler_seed"] = sampler.seed
        facts["num_replicas"] = sampler.num_replicas
        facts["sampler_rank"] = getattr(sampler, "rank", None)
        facts["sampler_site"] = sampler.__dict__.get("_ddpdoctor_site")
    if static["num_workers"] > 0:
        facts["worker_base_seed"] = getattr(it, "_base_seed", None)
    return facts


CHAIN_FRAMES = 4  # frames outside torch and ddpdoctor that identify a loader's creation


_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB = os.path.dirname(os.__file__) + os.sep
_internal_code: dict[Any, bool] = {}


def _internal(code: Any) -> bool:
    """Is this code torch's, ddpdoctor's or the standard library's?"""
    hit = _internal_code.get(code)
    if hit is None:
        fn = code.co_filename
        hit = _internal_code[code] = (
            fn.startswith(_PKG_DIR) or f"{os.sep}torch{os.sep}" in fn or fn.startswith("<frozen")
            or (fn.startswith(_STDLIB) and "site-packages" not in fn))
    return hit


def frame_chain(depth: int) -> str:
    """``file:line`` of the innermost frames outside torch, ddpdoctor and the standard
    library, starting ``depth`` frames up (file base names: the same on every rank)."""
    f = sys._getframe(depth + 1)
    out: list[str] = []
    internal = _internal
    while f is not None and len(out) < CHAIN_FRAMES:
        if not internal(f.f_code):
            out.append(f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}")
        f = f.f_back
    return ">".join(out)


def loader_signature(loader: Any) -> str:
    """What tells one DataLoader object from another, the same on every rank: the frames
    that constructed it (its user line, and a framework's line that built it), its
    dataset and sampler types, batch size, shuffle and drop_last.  Lengths are left out
    (ranks may hold shards of different sizes of the same loader)."""
    cached = loader.__dict__.get("_ddpdoctor_signature")
    if cached is not None:
        return cached
    made = loader.__dict__.get("_ddpdoctor_made")
    sampler = _sampler_of(loader)
    loader.__dict__["_ddpdoctor_signature"] = signature = "|".join(map(str, (
        made[1] if made else "?", type(loader).__name__, type(loader.dataset).__name__,
        type(sampler).__name__, loader.batch_size, _shuffles(sampler),
        bool(loader.drop_last))))
    return signature


def loader_id(signature: str, site: str) -> int:
    """A loader's id: a hash of its construction signature and the user's line that
    iterates it.  The same on every rank (even when only some ranks iterate another
    loader, e.g. rank 0's evaluation, or all loaders are iterated from one framework
    line), and across loaders re-created each epoch by the same code."""
    return zlib.crc32(f"{signature}#{site}".encode()) & 0x7FFFFFFF
