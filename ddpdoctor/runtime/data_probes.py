"""Data probes: record DataLoader epochs and batches, sampler set_epoch calls and RNG
fingerprints inside each rank, so analysis can tell uneven batches, shared seeds, stale
shuffles and unsharded data.

Patched at class level (no change to the user's script):

- ``DataLoader.__init__``: where the loader was built (the user's line and the frames
  that built it), kept on the loader.
- ``DataLoader.__iter__``: one ``loader_epoch`` meta event per iteration of a loader
  (loader id, epoch, predicted length where ``len()`` is defined, sampler, worker seed).
  The id tells loader objects apart (``loader_facts.loader_id``: how the loader was built
  and the line that iterates it), the same on every rank.
- Sample indices: taken at the fetch (``_MapDatasetFetcher.fetch``) without workers; with
  workers, indices are drawn ahead of batches, so ``_MultiProcessingDataLoaderIter.
  _next_index`` keeps their fingerprints in a FIFO on the iterator.
- ``_BaseDataLoaderIter.__next__``: the batch counted in the header's loader-progress
  slot of its epoch (one store: exact even for a rank killed the next moment), and one
  BATCH ring record per batch (seq = batch index, aux = epoch, numel = batch size, text
  ``|||<loader>:<indices hex>:<contents hex>``, ``-`` for a fingerprint not taken:
  contents only for the first ``FIRST_FPS`` batches of a loader's first ``CONTENT_EPOCHS``
  epochs).  An epoch's first ``FIRST_FPS`` records are written at once; later ones are
  held and written ``HOLD`` at a time (and at the epoch's end, the next epoch's start and
  the process's exit): a record written after a training step costs ~10 us of cold
  caches, a record among others ~1 us.  At the end of the epoch a ``loader_end`` meta
  event (batch count, order and content digests, the first batches' fingerprints,
  optimizer steps).
- ``DistributedSampler.set_epoch``: a ``set_epoch`` meta event.
- RNG: ``rng`` meta events at the first batches of the process (torch, numpy, python
  ``random`` state fingerprints; the states are copied, never advanced): the states after
  the batch, before its fetch (``fetch_before``, when the batch is fetched in the rank's
  process) and the generators the fetch drew from (``fetch_drew``: augmentation), and the
  framework that seeds every rank alike on purpose (``framework``), if any.
- DataLoader workers: ``worker_rng`` lines in the parent rank's meta log saying whether
  the worker consumed randomness, and the state it drew from (compared across ranks by
  the seed detector).

A probe that fails notes the error (``runtime_error`` meta event) and switches itself off;
it never raises into the user's job.
"""

from __future__ import annotations

import atexit
import collections
import functools
import os
import sys
import time
from typing import Any

from ddpdoctor.runtime import batch_records as B
from ddpdoctor.runtime import fetch_probes
from ddpdoctor.runtime import loader_facts as F
from ddpdoctor.runtime.fetch_probes import armed as _armed
from ddpdoctor.runtime.fetch_probes import fetch_prints as _fetch_prints
from ddpdoctor.runtime.fetch_probes import last_index as _last_index
from ddpdoctor.runtime import recorder as R
from ddpdoctor.runtime.data_fingerprints import (_MASK, batch_size, indices_fingerprint,
                                                 rng_fingerprints, seeding_framework,
                                                 tensor_fingerprint)
from ddpdoctor.trace import layout as L

RNG_AT_BATCHES = (0, 1, 3)  # batches of the process's first loader epoch to fingerprint
FIRST_FPS = 8  # first batches of an epoch whose contents are fingerprinted (kept in loader_end)
CONTENT_EPOCHS = 2  # epochs of each loader whose first batches' contents are fingerprinted
_BATCH = int(L.RecordKind.BATCH)

_on = {"batch": True, "rng": True, "set_epoch": True}
_epochs: dict[int, int] = {}  # loader id -> epochs started
_rng_points_left = list(RNG_AT_BATCHES)
_rng_loader: tuple[int, int] | None = None  # (loader, epoch) whose batches get RNG prints
_installed = False
_time_ns = time.time_ns


def _recorder() -> R.Recorder | None:
    """The rank's recorder; None outside ranks (a trace is created only in a rank)."""
    rec = R._recorder
    if rec is not None:
        return rec if rec.enabled else None
    if os.environ.get("RANK") is None and not _dist_initialized():
        return None
    return R.active()


def _dist_initialized() -> bool:
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:  # noqa: BLE001 - a half-imported torch: not a rank yet
        return False


def _disable(probe: str, where: str, error: BaseException) -> None:
    _on[probe] = False
    if probe == "rng":
        _rng_points_left.clear()
    rec = R._recorder
    if rec is not None:
        rec.note_error(f"data probe {where} (probe disabled)", error)


# -- per-iterator state -----------------------------------------------------------------
class LoaderEpoch:
    """What the probes know about one iteration (epoch) of one DataLoader."""

    __slots__ = ("loader", "epoch", "batches", "prints", "order", "content", "steps0",
                 "ended", "indices", "prefix", "contents", "ahead", "table", "slot")

    def __init__(self, loader: int, epoch: int, steps0: int, ahead: bool = True):
        self.loader = loader
        self.epoch = epoch
        self.batches = 0
        self.prints: list[str] = []
        self.order = 0  # running digest of the sample order (indices, else contents)
        self.content = 0  # running digest of the batches' contents
        self.steps0 = steps0
        self.ended = False
        self.indices: collections.deque = collections.deque()
        self.prefix = f"|||{loader}:"  # the BATCH records' text starts so
        # batches whose contents are fingerprinted: the first ones of the first epochs
        self.contents = FIRST_FPS if epoch < CONTENT_EPOCHS else 0
        self.ahead = ahead  # indices drawn ahead of batches (workers), else at the fetch
        self.table: memoryview | None = None  # the header's loader-progress table ...
        self.slot = 0  # ... and where this epoch's batch count sits in it


def _start_epoch(loader: Any, it: Any) -> LoaderEpoch | None:
    global _rng_loader
    rec = _recorder()
    if rec is None:
        return None
    site = R.user_callsite(3)
    lid = F.loader_id(F.loader_signature(loader), site)
    epoch = _epochs.get(lid, 0)
    _epochs[lid] = epoch + 1
    ep = LoaderEpoch(lid, epoch, rec.steps, getattr(it, "_num_workers", 0) > 0)
    B.flush_held()
    B.claim_slot(rec, ep)
    old = it.__dict__.get("_ddpdoctor_epoch")
    if old is not None:  # persistent workers: indices drawn ahead belong to this epoch
        ep.indices = old.indices
    it.__dict__["_ddpdoctor_epoch"] = ep
    if _rng_loader is None and _on["rng"]:
        _rng_loader = (lid, epoch)
    made = loader.__dict__.get("_ddpdoctor_made")
    rec.meta("loader_epoch", site=site, created=made[0] if made else None,
             **F.epoch_facts(loader, it, lid, epoch, ep.steps0))
    if _rng_loader is not None and _rng_loader[0] == lid:
        rec.set_epoch(epoch)  # the header's epoch follows the first loader iterated
    return ep


def _end_epoch(rec: R.Recorder, ep: LoaderEpoch) -> None:
    ep.ended = True
    B.flush_held()
    first = ep.prints if ep.contents else []  # kept while contents are fingerprinted
    rec.meta("loader_end", loader=ep.loader, epoch=ep.epoch, batches=ep.batches,
             order=f"{ep.order:016x}" if ep.order else None,
             content=f"{ep.content:016x}", first=first, steps=rec.steps - ep.steps0)


def _epoch_of(it: Any) -> LoaderEpoch | None:
    ep = it.__dict__.get("_ddpdoctor_epoch")
    if ep is None:  # an iterator made without DataLoader.__iter__ (e.g. _get_iterator)
        ep = LoaderEpoch(-1, 0, 0, getattr(it, "_num_workers", 0) > 0)
        it.__dict__["_ddpdoctor_epoch"] = ep
    return ep


def _on_batch(it: Any, data: Any) -> None:
    """One batch drawn: its count and BATCH record (the hot path: kept short)."""
    rec = R._recorder
    if rec is None or not rec.enabled:
        return
    ep = it.__dict__.get("_ddpdoctor_epoch") or _epoch_of(it)
    i = ep.batches
    ep.batches = i + 1
    now = _time_ns()
    table = ep.table
    if table is not None:  # the exact count first: the rest may be held back
        table[ep.slot] = i + 1
        table[ep.slot + 1] = now
    if now >= rec._heartbeat_due:
        rec.heartbeat(now)
    if ep.ahead:
        fi, size = ep.indices.popleft() if ep.indices else (None, 0)
    else:  # no workers: the fetch just took this batch's indices
        index = _last_index[0]
        _last_index[0] = None
        fi = indices_fingerprint(index)
        size = 0 if fi is None else (len(index) if type(index) is not int else 1)
    if i < ep.contents:  # contents of the first batches only: enough to compare ranks
        ft, tsize = tensor_fingerprint(data)
        if ft is not None:
            ep.content = hash((ep.content, ft)) & _MASK
        order = fi if fi is not None else ft
        fi_hex = "-" if fi is None else f"{fi:016x}"
        ft_hex = "-" if ft is None else f"{ft:016x}"
        text = f"{fi_hex}:{ft_hex}"
        ep.prints.append(text)
        rec.mark("batch", i, ep.epoch, size or tsize, ep.prefix + text, _BATCH)
    else:
        order = fi
        if fi is None:
            size = batch_size(data)
        if i < FIRST_FPS:  # an epoch's first batches go out at once (the order's prints)
            rec.mark("batch", i, ep.epoch, size, B.batch_text(ep.prefix, fi), _BATCH)
        else:
            held = B.held
            held.append((i, ep.epoch, size, now, ep.prefix, fi))
            if len(held) >= B.HOLD:
                B.flush_held()
    if order is not None:
        ep.order = hash((ep.order, order)) & _MASK
    if _rng_points_left and _on["rng"] and i == _rng_points_left[0] and \
            _rng_loader == (ep.loader, ep.epoch):
        _rng_points_left.pop(0)
        try:
            extra: dict[str, Any] = {}
            if _fetch_prints:  # the batch was fetched in this process: what did it draw?
                before, after = _fetch_prints
                extra["fetch_before"] = before
                extra["fetch_drew"] = [k for k in ("torch", "numpy", "python")
                                       if k in after and before.get(k) != after[k]]
                _fetch_prints.clear()
            framework = seeding_framework()
            if framework:
                extra["framework"] = framework
                if framework == "lightning":
                    extra["seed_workers"] = os.environ.get("PL_SEED_WORKERS") == "1"
            rec.meta("rng", loader=ep.loader, epoch=ep.epoch, batch=i, **rng_fingerprints(),
                     **extra)
        except Exception as e:  # noqa: BLE001 - the rng probe alone goes off
            _disable("rng", "rng fingerprint", e)


# -- patches -----------------------------------------------------------------------------
def _patch_iter(cls: Any) -> None:
    original = cls.__iter__

    @functools.wraps(original)
    def __iter__(self: Any) -> Any:
        it = original(self)
        if _on["batch"]:
            try:
                _start_epoch(self, it)
            except Exception as e:  # noqa: BLE001 - never into the user's loop
                _disable("batch", "DataLoader.__iter__", e)
        return it

    __iter__.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls.__iter__ = __iter__


def _patch_init(cls: Any) -> None:
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if _on["batch"]:
            try:  # where the loader was made: (the user's line, the frames that made it)
                self.__dict__["_ddpdoctor_made"] = (R.user_callsite(2), F.frame_chain(1))
            except Exception as e:  # noqa: BLE001 - never into the user's code
                _disable("batch", "DataLoader.__init__", e)

    __init__.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls.__init__ = __init__


def _patch_next_index(cls: Any) -> None:
    original = cls._next_index

    @functools.wraps(original)
    def _next_index(self: Any) -> Any:
        index = original(self)  # StopIteration passes through untouched
        if _on["batch"]:
            try:
                fp = indices_fingerprint(index)
                size = len(index) if type(index) in (list, tuple) else 1
                ep = _epoch_of(self)
                ep.indices.append((fp, size if fp is not None else 0))
            except Exception as e:  # noqa: BLE001
                _disable("batch", "sampler indices", e)
        return index

    _next_index.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls._next_index = _next_index


def _patch_reset(cls: Any) -> None:
    original = cls._reset

    @functools.wraps(original)
    def _reset(self: Any, *args: Any, **kwargs: Any) -> Any:
        ep = self.__dict__.get("_ddpdoctor_epoch")
        if ep is not None:
            ep.indices.clear()  # leftovers of an epoch the user broke out of
        return original(self, *args, **kwargs)

    _reset.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls._reset = _reset


def _patch_next(cls: Any) -> None:
    original = cls.__next__

    @functools.wraps(original)
    def __next__(self: Any) -> Any:
        if _rng_points_left:  # the first batches only (emptied when the probe is off)
            _arm_fetch(self)
        try:
            data = original(self)
        except StopIteration:
            _armed[0] = False  # an armed batch that never came
            if _on["batch"]:
                try:
                    ep = self.__dict__.get("_ddpdoctor_epoch")
                    rec = R._recorder
                    if ep is not None and not ep.ended and rec is not None and rec.enabled:
                        _end_epoch(rec, ep)
                except Exception as e:  # noqa: BLE001
                    _disable("batch", "end of epoch", e)
            raise
        if _on["batch"]:
            try:
                _on_batch(self, data)
            except Exception as e:  # noqa: BLE001
                _disable("batch", "batch", e)
        return data

    __next__.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls.__next__ = __next__


def _arm_fetch(it: Any) -> None:
    """Before an RNG-fingerprinted batch: let its fetch (dataset and collate, in this
    process when there are no workers) fingerprint the RNGs around itself, so draws in
    data loading are told from draws in the training step."""
    ep = it.__dict__.get("_ddpdoctor_epoch")
    if ep is not None and _rng_loader == (ep.loader, ep.epoch) and \
            ep.batches == _rng_points_left[0] and getattr(it, "_num_workers", 0) == 0:
        _fetch_prints.clear()
        _armed[0] = True


def _patch_set_epoch(cls: Any) -> None:
    original = cls.set_epoch

    @functools.wraps(original)
    def set_epoch(self: Any, epoch: int) -> Any:
        result = original(self, epoch)
        if _on["set_epoch"]:
            try:
                rec = _recorder()
                if rec is not None:
                    rec.meta("set_epoch", epoch=int(epoch), sampler=type(self).__name__)
            except Exception as e:  # noqa: BLE001
                _disable("set_epoch", "DistributedSampler.set_epoch", e)
        return result

    set_epoch.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls.set_epoch = set_epoch


def install() -> None:
    """Patch DataLoader iteration, DistributedSampler.set_epoch and the dataset fetchers
    (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    from torch.utils.data import DataLoader, DistributedSampler, get_worker_info
    from torch.utils.data import dataloader as dl
    from torch.utils.data._utils import fetch

    base = dl._BaseDataLoaderIter
    _patch_init(DataLoader)
    _patch_iter(DataLoader)
    _patch_next_index(dl._MultiProcessingDataLoaderIter)  # indices drawn ahead of batches
    _patch_reset(base)
    _patch_next(base)
    _patch_set_epoch(DistributedSampler)
    for cls in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):
        fetch_probes.patch_fetcher(cls, get_worker_info, _disable)
    atexit.register(B.flush_held)
    if os.register_at_fork is not None:
        os.register_at_fork(after_in_child=fetch_probes.after_fork)
        os.register_at_fork(after_in_child=B.after_fork)
