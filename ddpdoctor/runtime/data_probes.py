"""Data probes: record DataLoader epochs and batches, sampler set_epoch calls and RNG
fingerprints inside each rank, so analysis can tell uneven batches, shared seeds, stale
shuffles and unsharded data.

Patched at class level (no change to the user's script):

- ``DataLoader.__iter__``: one ``loader_epoch`` meta event per iteration of a loader
  (loader id, epoch, predicted length where ``len()`` is defined, sampler, worker seed).
- ``_BaseDataLoaderIter._next_index``: a fingerprint of each batch's sample indices
  (kept in a FIFO on the iterator: with workers, indices are drawn ahead of batches).
- ``_BaseDataLoaderIter.__next__``: one BATCH ring record per batch (seq = batch index,
  aux = epoch, numel = batch size, text ``|||<loader>:<indices hex>:<contents hex>``,
  ``-`` for a fingerprint not taken: contents only for an epoch's first ``FIRST_FPS``
  batches); at the end of the epoch a ``loader_end`` meta event (batch count, order and
  content digests, optimizer steps).
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

import collections
import functools
import hashlib
import json
import os
import sys
import time
import zlib
from typing import Any, Callable

from ddpdoctor.runtime import recorder as R
from ddpdoctor.trace import layout as L

RNG_AT_BATCHES = (0, 1, 3)  # batches of the process's first loader epoch to fingerprint
FIRST_FPS = 8  # batches of an epoch whose fingerprints are kept in loader_end
CONTENT_EPOCHS = 2  # epochs of each loader whose first batches' contents are fingerprinted
_MASK = (1 << 64) - 1
_BATCH = int(L.RecordKind.BATCH)

_on = {"batch": True, "rng": True, "set_epoch": True, "worker": True}
_epochs: dict[int, int] = {}  # loader id -> epochs started
_rng_points_left = list(RNG_AT_BATCHES)
_rng_loader: tuple[int, int] | None = None  # (loader, epoch) whose batches get RNG prints
_installed = False
_armed = [False]  # the next main-process fetch fingerprints the RNGs around itself
_fetch_prints: list[dict[str, Any]] = []  # [before, after] of the last armed fetch
_last_index: list[Any] = [None]  # the indices of the last fetch in this process


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


# -- fingerprints ---------------------------------------------------------------------
def indices_fingerprint(indices: Any) -> int | None:
    """A process-independent hash of a batch's sample indices (ints only), else None."""
    if type(indices) is int:
        return hash((indices,)) & _MASK
    if type(indices) in (list, tuple) and indices and type(indices[0]) is int:
        return hash(tuple(indices)) & _MASK
    return None


def _first_tensor(data: Any, depth: int = 0) -> Any:
    tensor = _tensor_type()
    if type(data) is tensor or isinstance(data, tensor):
        return data
    if depth > 2:
        return None
    if isinstance(data, (list, tuple)):
        for item in data[:4]:
            t = _first_tensor(item, depth + 1)
            if t is not None:
                return t
    elif isinstance(data, dict):
        for item in list(data.values())[:4]:
            t = _first_tensor(item, depth + 1)
            if t is not None:
                return t
    return None


@functools.lru_cache(maxsize=None)
def _tensor_type() -> type:
    import torch

    return torch.Tensor


def tensor_fingerprint(data: Any) -> tuple[int | None, int]:
    """(hash of the shape and 16 strided elements of the batch's first tensor, its
    leading dimension); (None, 0) when the batch holds no tensor.  Reads the elements
    through numpy where it can (a torch op costs more than the whole fingerprint)."""
    t = _first_tensor(data)
    if t is None:
        return None, 0
    size = int(t.shape[0]) if t.dim() else 1
    n = t.numel()
    if n == 0:
        return hash(tuple(t.shape)) & _MASK, 0
    step = max(1, n // 16)
    t = t.detach()
    try:
        values = tuple(t.numpy().flat[::step][:16].tolist())
    except (TypeError, RuntimeError):  # not on the CPU, or a dtype numpy lacks
        values = tuple(t.reshape(-1)[::step][:16].float().cpu().tolist())
    return hash((tuple(t.shape), t.element_size(), values)) & _MASK, size


def batch_size(data: Any) -> int:
    t = _first_tensor(data)
    return 0 if t is None else (int(t.shape[0]) if t.dim() else 1)


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def rng_fingerprints() -> dict[str, Any]:
    """Fingerprints of the global RNG states (copies: no generator is advanced)."""
    import torch

    out: dict[str, Any] = {"torch": _digest(torch.random.get_rng_state().numpy().tobytes()),
                           "torch_seed": torch.initial_seed()}
    random = sys.modules.get("random")
    if random is not None:
        state = random.getstate()
        out["python"] = f"{hash(state[1]) & _MASK:016x}"
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            st = np.random.get_state()
            out["numpy"] = _digest(st[1].tobytes() + int(st[2]).to_bytes(8, "little"))
        except (AttributeError, TypeError, ValueError):
            pass
    return out


def seeding_framework() -> str | None:
    """The framework that seeds every rank alike on purpose (same initial model), if one
    drives this process: transformers' Trainer (``set_seed(args.seed)``), Lightning
    (``seed_everything``), accelerate (``set_seed``)."""
    mods = sys.modules
    if "transformers.trainer" in mods:
        return "transformers"
    if os.environ.get("PL_GLOBAL_SEED") is not None and (
            "lightning.pytorch" in mods or "pytorch_lightning" in mods or "lightning" in mods):
        return "lightning"
    if "accelerate.accelerator" in mods:
        return "accelerate"
    return None


# -- per-iterator state -----------------------------------------------------------------
class LoaderEpoch:
    """What the probes know about one iteration (epoch) of one DataLoader."""

    __slots__ = ("loader", "epoch", "batches", "prints", "order", "content", "steps0",
                 "ended", "indices", "prefix", "contents", "ahead")

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


def _epoch_facts(loader: Any, it: Any, ep: LoaderEpoch) -> dict[str, Any]:
    from torch.utils.data import DistributedSampler, IterableDataset

    sampler = _sampler_of(loader)
    dataset = loader.dataset
    facts: dict[str, Any] = {
        "loader": ep.loader, "epoch": ep.epoch, "length": _predicted_length(loader),
        "batch_size": loader.batch_size, "drop_last": bool(loader.drop_last),
        "iterable": isinstance(dataset, IterableDataset),
        "dataset": type(dataset).__name__, "sampler": type(sampler).__name__
        if sampler is not None else None, "shuffle": _shuffles(sampler),
        "num_workers": loader.num_workers, "steps": ep.steps0,
    }
    try:
        facts["samples"] = len(sampler) if sampler is not None and not facts["iterable"] \
            else len(dataset)
    except (TypeError, NotImplementedError):
        facts["samples"] = None
    if isinstance(sampler, DistributedSampler):
        facts["sampler_epoch"] = sampler.epoch
        facts["sampler_seed"] = sampler.seed
        facts["num_replicas"] = sampler.num_replicas
    if loader.num_workers > 0:
        facts["worker_base_seed"] = getattr(it, "_base_seed", None)
    return facts


CHAIN_FRAMES = 4  # frames outside torch and ddpdoctor that identify a loader's creation


def _frame_chain(depth: int) -> str:
    """``file:line`` of the innermost frames outside torch, ddpdoctor and the standard
    library, starting ``depth`` frames up (file base names: the same on every rank)."""
    f = sys._getframe(depth + 1)
    out: list[str] = []
    internal = R._is_internal
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


def _start_epoch(loader: Any, it: Any) -> LoaderEpoch | None:
    global _rng_loader
    rec = _recorder()
    if rec is None:
        return None
    site = R.user_callsite(3)
    lid = loader_id(loader_signature(loader), site)
    epoch = _epochs.get(lid, 0)
    _epochs[lid] = epoch + 1
    ep = LoaderEpoch(lid, epoch, rec.steps, getattr(it, "_num_workers", 0) > 0)
    old = it.__dict__.get("_ddpdoctor_epoch")
    if old is not None:  # persistent workers: indices drawn ahead belong to this epoch
        ep.indices = old.indices
    it.__dict__["_ddpdoctor_epoch"] = ep
    if _rng_loader is None and _on["rng"]:
        _rng_loader = (lid, epoch)
    made = loader.__dict__.get("_ddpdoctor_made")
    rec.meta("loader_epoch", site=site, created=made[0] if made else None,
             **_epoch_facts(loader, it, ep))
    if _rng_loader is not None and _rng_loader[0] == lid:
        rec.set_epoch(epoch)  # the header's epoch follows the first loader iterated
    return ep


def _end_epoch(rec: R.Recorder, ep: LoaderEpoch) -> None:
    ep.ended = True
    rec.meta("loader_end", loader=ep.loader, epoch=ep.epoch, batches=ep.batches,
             order=f"{ep.order:016x}" if ep.order else None,
             content=f"{ep.content:016x}", first=ep.prints,
             steps=rec.steps - ep.steps0)


def _epoch_of(it: Any) -> LoaderEpoch | None:
    ep = it.__dict__.get("_ddpdoctor_epoch")
    if ep is None:  # an iterator made without DataLoader.__iter__ (e.g. _get_iterator)
        ep = LoaderEpoch(-1, 0, 0, getattr(it, "_num_workers", 0) > 0)
        it.__dict__["_ddpdoctor_epoch"] = ep
    return ep


def _on_batch(it: Any, data: Any) -> None:
    """One batch drawn: its BATCH record (the hot path: kept short)."""
    rec = R._recorder
    if rec is None or not rec.enabled:
        return
    ep = it.__dict__.get("_ddpdoctor_epoch") or _epoch_of(it)
    i = ep.batches
    ep.batches = i + 1
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
        text = f"{ep.prefix}{fi_hex}:{ft_hex}"
    elif fi is not None:
        order, tsize = fi, 0
        text = f"{ep.prefix}{fi:016x}:-"
    else:
        order, tsize = None, batch_size(data)
        text = ep.prefix + "-:-"
    if order is not None:
        ep.order = hash((ep.order, order)) & _MASK
    if i < FIRST_FPS:
        ep.prints.append(text[len(ep.prefix):])
    rec.mark("batch", i, ep.epoch, size or tsize, text, _BATCH)
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
                self.__dict__["_ddpdoctor_made"] = (R.user_callsite(2), _frame_chain(1))
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


# -- DataLoader workers ----------------------------------------------------------------
class _WorkerProbe:
    """Inside a DataLoader worker: did fetching its first batch consume randomness?  Told
    once, by a line in the parent rank's meta log (a worker has no trace of its own)."""

    done = False


def _worker_note(info: Any, consumed: list[str], before: dict[str, Any]) -> None:
    run_dir = os.environ.get(R.ENV_RUN_DIR)
    if not run_dir:
        return
    path = os.path.join(run_dir, "traces", f"pid-{os.getppid()}.meta.jsonl")
    line = json.dumps({"event": "worker_rng", "t": time.time_ns(), "pid": os.getpid(),
                       "worker": info.id, "seed": info.seed, "consumed": consumed,
                       "state": {k: before[k] for k in consumed if k in before}}) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)  # the parent's log, never created
    except OSError:
        return
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _fetch_between_prints(original: Callable[..., Any], fetcher: Any, index: Any) -> Any:
    """One main-process fetch with the RNGs fingerprinted before and after it."""
    _armed[0] = False
    try:
        before = rng_fingerprints()
    except Exception as e:  # noqa: BLE001 - the rng probe alone goes off
        _disable("rng", "rng fingerprint", e)
        return original(fetcher, index)
    data = original(fetcher, index)
    try:
        _fetch_prints[:] = [before, rng_fingerprints()]
    except Exception as e:  # noqa: BLE001
        _disable("rng", "rng fingerprint", e)
    return data


def _patch_fetcher(cls: Any, get_info: Callable[[], Any]) -> None:
    original = cls.fetch

    @functools.wraps(original)
    def fetch(self: Any, possibly_batched_index: Any) -> Any:
        _last_index[0] = possibly_batched_index
        if _armed[0]:
            return _fetch_between_prints(original, self, possibly_batched_index)
        if _WorkerProbe.done or not _on["worker"]:
            return original(self, possibly_batched_index)
        _WorkerProbe.done = True
        try:
            info = get_info()
            before = rng_fingerprints() if info is not None else None
        except Exception:  # noqa: BLE001 - a worker has no log of its own to tell
            _on["worker"] = False
            before = None
        data = original(self, possibly_batched_index)
        if before is not None:
            try:
                after = rng_fingerprints()
                _worker_note(info, [k for k in ("torch", "numpy", "python")
                                    if k in after and before.get(k) != after[k]], before)
            except Exception:  # noqa: BLE001
                _on["worker"] = False
        return data

    fetch.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls.fetch = fetch


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
        _patch_fetcher(cls, get_worker_info)
    if os.register_at_fork is not None:
        os.register_at_fork(after_in_child=_after_fork)


def _after_fork() -> None:
    """A forked process (a DataLoader worker) starts its worker probe afresh."""
    _WorkerProbe.done = False
