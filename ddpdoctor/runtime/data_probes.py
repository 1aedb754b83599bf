"""Data probes: record DataLoader epochs and batches, sampler set_epoch calls and RNG
fingerprints inside each rank, so analysis can tell uneven batches, shared seeds, stale
shuffles and unsharded data.  An epoch's batches past its first ones run torch's code
alone: the probes cost the step nothing there.

Patched at class level (no change to the user's script):

- ``DataLoader.__init__``: where the loader was built (the user's line and the frames
  that built it), kept on the loader.
- ``DataLoader.__iter__``: one ``loader_epoch`` meta event per iteration of a loader
  (loader id, epoch, predicted length where ``len()`` is defined, sampler, worker seed).
  The id tells loader objects apart (``loader_facts.loader_id``: how the loader was built
  and the line that iterates it), the same on every rank.  Then the iterator gets its
  hooks (``iterator_hooks``: on the object, never its class).
- ``_BaseDataLoaderIter._reset``: with workers, an epoch's first indices are drawn there.
- ``__del__`` of the iterators: an iterator the user dropped leaves its last count.
- ``DistributedSampler.set_epoch``: a ``set_epoch`` meta event.
- ``DistributedSampler.__init__``: where the sampler was built (the user's line), named
  with its seed and rank in the ``loader_epoch`` event.

Per iterator:

- The sampler tap (map-style datasets): the first ``FIRST_FPS`` index lists of an epoch
  are fingerprinted as they are drawn; when the sampler runs dry the epoch ends (one
  process) or its last batches in flight pass the batch hook (workers).
- The batch hook sees an epoch's first ``FIRST_FPS`` batches, then is taken off (an
  iterable dataset's epoch ends as its iterator is freed, or at exit, if its fetcher ran
  dry; the hook stays on for the StopIteration of one read by workers or unbatched).
  Each seen batch is counted in the header's loader-progress slot of its epoch and its
  first ones get a BATCH ring record
  (seq = batch index, aux = epoch, numel = batch size, text ``|||<loader>:<indices
  hex>:<contents hex>``, ``-`` for a fingerprint not taken: contents only in a loader's
  first ``CONTENT_EPOCHS`` epochs).  The batches in between are counted by a sampling
  thread (``batch_counts``).  At the end of the epoch a ``loader_end`` meta event (batch
  count, the first batches' order and content digests and fingerprints, optimizer steps).
- RNG: ``rng`` meta events at the first batches of the process (torch, numpy, python
  ``random`` state fingerprints; the states are copied, never advanced): the states after
  the batch, before its fetch (``fetch_before``, when the batch is fetched in the rank's
  process) and the generators the fetch drew from (``fetch_drew``: augmentation), and the
  framework that seeds every rank alike on purpose (``framework``), if any.
- DataLoader workers (forked or spawned): ``worker_rng`` lines in the parent rank's meta
  log saying whether the worker consumed randomness, and the state it drew from (compared
  across ranks by the seed detector).

A probe that fails notes the error (``runtime_error`` meta event) and switches itself off;
it never raises into the user's job.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import time
import weakref
from typing import Any

from ddpdoctor.runtime import batch_counts as B
from ddpdoctor.runtime import fetch_probes
from ddpdoctor.runtime import iterator_hooks as H
from ddpdoctor.runtime import loader_facts as F
from ddpdoctor.runtime import recorder as R
from ddpdoctor.runtime.data_fingerprints import (_MASK, batch_size, indices_fingerprint,
                                                 tensor_fingerprint)
from ddpdoctor.runtime.init_hooks import is_rank_child
from ddpdoctor.runtime.loader_epochs import (FIRST_FPS, LoaderEpoch, end_epoch,
                                             fetcher_tells_end, freed)
from ddpdoctor.trace import layout as L

RNG_AT_BATCHES = (0, 1, 3)  # batches of the process's first loader epoch to fingerprint
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


def _start_epoch(loader: Any, it: Any) -> None:
    global _rng_loader
    rec = _recorder()
    if rec is None:
        return
    site = R.user_callsite(3)
    lid = F.loader_id(F.loader_signature(loader), site)
    epoch = _epochs.get(lid, 0)
    _epochs[lid] = epoch + 1
    tap = H.tap_of(it)
    if tap is None and getattr(it, "_num_workers", 0) == 0 and _map_style(it):
        tap = _tap(it)  # one process: nothing drawn yet
    ep = LoaderEpoch(lid, epoch, rec.steps, tap.prints if tap is not None else None)
    ep.iter_ref = tap.iter_ref if tap is not None else weakref.ref(it)
    if tap is not None:
        tap.ep = ep
        ep.to_end = tap.dry  # workers drew every index ahead: its end passes the hook
    else:  # an iterable dataset: in one process, batched, its end is seen as it is freed
        ep.to_end = not fetcher_tells_end(it)
    B.claim_slot(rec, ep)
    it.__dict__["_ddpdoctor_epoch"] = ep
    if _rng_loader is None and _on["rng"]:
        _rng_loader = (lid, epoch)
    made = loader.__dict__.get("_ddpdoctor_made")
    rec.meta("loader_epoch", site=site, created=made[0] if made else None,
             **F.epoch_facts(loader, it, lid, epoch, ep.steps0))
    if _rng_loader is not None and _rng_loader[0] == lid:
        rec.set_epoch(epoch)  # the header's epoch follows the first loader iterated
    _arm(it)
    B.start()


def _map_style(it: Any) -> bool:
    return getattr(it, "_dataset_kind", None) == 0  # torch's _DatasetKind.Map


# -- the sampler tap: the first batches' indices, the epoch's end ------------------------
def _tap(it: Any) -> H.SamplerTap:
    return H.tap(it, FIRST_FPS, _on_draw, _on_dry)


def _on_draw(tap: H.SamplerTap, index: Any) -> None:
    """One of an epoch's first index lists drawn (before its batch, or ahead by workers)."""
    if not _on["batch"]:
        return
    try:
        fp = indices_fingerprint(index)
        size = len(index) if type(index) in (list, tuple) else 1
        tap.prints.append((fp, size if fp is not None else 0))
    except Exception as e:  # noqa: BLE001 - never into the user's loop
        _disable("batch", "sampler indices", e)


def _on_dry(tap: H.SamplerTap) -> None:
    """The sampler ran dry: in one process the batch now asked for is the epoch's end;
    with workers the batches in flight pass the hook, then the epoch's StopIteration."""
    ep = tap.ep
    if ep is None or ep.ended or not _on["batch"]:
        return  # ep None: workers drew every index before the epoch began (see _start_epoch)
    try:
        it = tap.iter_ref()
        rec = R._recorder
        if it is None or rec is None or not rec.enabled:
            return
        if getattr(it, "_num_workers", 0) == 0:
            end_epoch(rec, ep, it)
        else:
            ep.to_end = True
            _arm(it)
    except Exception as e:  # noqa: BLE001
        _disable("batch", "end of epoch", e)


# -- the batch hook: an epoch's first batches (and the last ones where needed) -----------
def _arm(it: Any) -> None:
    H.arm(it, _on_batch, _on_stop, _before_batch)


def _before_batch(it: Any) -> None:
    if _rng_points_left:  # the first batches only (emptied when the probe is off)
        _arm_fetch(it)


def _on_stop(it: Any, hook: Any) -> None:
    H.disarm(it, hook)
    fetch_probes.disarm(getattr(it, "_dataset_fetcher", None))  # a fetch that never came
    if not _on["batch"]:
        return
    try:
        ep = it.__dict__.get("_ddpdoctor_epoch")
        rec = R._recorder
        if ep is not None and not ep.ended and rec is not None and rec.enabled:
            end_epoch(rec, ep, it)
    except Exception as e:  # noqa: BLE001
        _disable("batch", "end of epoch", e)


def _on_batch(it: Any, data: Any, hook: Any) -> None:
    if not _on["batch"]:
        H.disarm(it, hook)
        return
    try:
        _probe_batch(it, data, hook)
    except Exception as e:  # noqa: BLE001 - never into the user's loop
        H.disarm(it, hook)
        _disable("batch", "batch", e)


def _probe_batch(it: Any, data: Any, hook: Any) -> None:
    """One batch drawn: its count, and for the epoch's first ones its fingerprints and
    BATCH record (seq = batch index, aux = epoch, numel = batch size)."""
    rec = R._recorder
    ep = it.__dict__.get("_ddpdoctor_epoch")
    if rec is None or not rec.enabled or ep is None:
        H.disarm(it, hook)
        return
    i = B.drawn(it)  # batches before this one (torch counts it when the hook returns)
    i = ep.batches if i is None else i
    ep.batches = i + 1
    now = _time_ns()
    B.count(ep, i + 1, now)
    if now >= rec._heartbeat_due:
        rec.heartbeat(now)
    if i >= FIRST_FPS:  # an epoch's last batches in flight, or an iterable dataset's
        return
    if i + 1 >= FIRST_FPS and not ep.to_end:
        H.disarm(it, hook)  # the rest of the epoch runs torch's code alone
    fi, size = ep.indices.popleft() if ep.indices else (None, 0)
    ft = None
    text = "-:" if fi is None else f"{fi:016x}:"
    if i < ep.contents:  # contents of the first batches only: enough to compare ranks
        ft, tsize = tensor_fingerprint(data)
        if ft is not None:
            ep.content = hash((ep.content, ft)) & _MASK
        size = size or tsize
        text += "-" if ft is None else f"{ft:016x}"
        ep.prints.append(text)
    else:
        size = size or batch_size(data)
        text += "-"
    rec.mark("batch", i, ep.epoch, size, ep.prefix + text, _BATCH)
    order = fi if fi is not None else ft
    if order is not None:
        ep.order = hash((ep.order, order)) & _MASK
    if _rng_points_left and _on["rng"] and i == _rng_points_left[0] and \
            _rng_loader == (ep.loader, ep.epoch):
        _rng_points_left.pop(0)
        _rng_meta(rec, ep, i)


def _rng_meta(rec: R.Recorder, ep: LoaderEpoch, i: int) -> None:
    try:
        rec.meta("rng", loader=ep.loader, epoch=ep.epoch, batch=i, **fetch_probes.rng_fields())
    except Exception as e:  # noqa: BLE001 - the rng probe alone goes off
        _disable("rng", "rng fingerprint", e)


def _arm_fetch(it: Any) -> None:
    """Before an RNG-fingerprinted batch: let its fetch (dataset and collate, in this
    process when there are no workers) fingerprint the RNGs around itself, so draws in
    data loading are told from draws in the training step."""
    ep = it.__dict__.get("_ddpdoctor_epoch")
    if ep is not None and _rng_loader == (ep.loader, ep.epoch) and \
            B.drawn(it) == _rng_points_left[0] and getattr(it, "_num_workers", 0) == 0 and \
            getattr(it, "_dataset_fetcher", None) is not None:
        fetch_probes.fetch_prints.clear()
        fetch_probes.arm(it._dataset_fetcher, _disable)


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


def _patch_reset(cls: Any) -> None:
    """Workers draw an epoch's first indices inside ``_reset``, before ``__iter__`` returns:
    the tap goes on the new sampler iterator there."""
    original = cls._reset

    @functools.wraps(original)
    def _reset(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if _on["batch"]:
            try:
                if _map_style(self) and _recorder() is not None:
                    _tap(self)
            except Exception as e:  # noqa: BLE001
                _disable("batch", "sampler tap", e)
        return result

    _reset.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls._reset = _reset


def _at_exit() -> None:
    """The exact counts of the epochs still open as the process exits."""
    try:
        B.stop()
        for _, it in B.live():
            freed(it)
    except Exception:  # noqa: BLE001 - at exit: nothing to raise into
        pass


def _no_finalizer(self: Any) -> None:
    """What the base iterator class does at its end without the probes: nothing."""


def _patch_del(cls: Any) -> None:
    """An iterator about to be freed leaves its epoch's last batch count."""
    original = cls.__dict__.get("__del__", _no_finalizer)

    def __del__(self: Any) -> None:
        try:
            freed(self)
        except Exception:  # noqa: BLE001 - a finalizer never raises
            pass
        original(self)

    __del__.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls.__del__ = __del__


def _patch_sampler_init(cls: Any) -> None:
    """Where a DistributedSampler was built (the user's line): the ``loader_epoch`` event
    names it, so that a finding on the sampler's seed or rank points there."""
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if _on["batch"]:
            try:
                self.__dict__["_ddpdoctor_site"] = R.user_callsite(2)
            except Exception as e:  # noqa: BLE001 - never into the user's code
                _disable("batch", "DistributedSampler.__init__", e)

    __init__.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls.__init__ = __init__


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
    """Patch DataLoader construction and iteration and DistributedSampler.set_epoch (once
    per process); a rank's children (DataLoader workers, forked or spawned) get the worker
    probe's fetcher patches."""
    global _installed
    if _installed:
        return
    _installed = True
    from torch.utils.data import DataLoader, DistributedSampler
    from torch.utils.data import dataloader as dl

    _patch_init(DataLoader)
    _patch_iter(DataLoader)
    _patch_reset(dl._BaseDataLoaderIter)
    _patch_del(dl._BaseDataLoaderIter)
    _patch_del(dl._MultiProcessingDataLoaderIter)
    _patch_set_epoch(DistributedSampler)
    _patch_sampler_init(DistributedSampler)
    atexit.register(_at_exit)
    if os.register_at_fork is not None:
        os.register_at_fork(after_in_child=fetch_probes.after_fork)
        os.register_at_fork(after_in_child=B.after_fork)
    if is_rank_child():  # a spawned (or forkserver) DataLoader worker imports torch afresh
        fetch_probes.patch_worker_fetchers()
