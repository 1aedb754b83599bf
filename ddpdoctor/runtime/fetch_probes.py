"""Probes at the dataset fetch: the RNG states around an armed fetch in the rank (what a
batch's augmentation drew: one fetcher, once), and whether a DataLoader worker's first fetch
consumed randomness (a ``worker_rng`` line in the parent rank's meta log; the fetcher
classes are patched in worker processes only, never on the rank's step path)."""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from typing import Any, Callable

from ddpdoctor.frameworks import lightning
from ddpdoctor.runtime import recorder as R
from ddpdoctor.runtime.data_fingerprints import rng_fingerprints, seeding_framework
from ddpdoctor.rundir.safe_path import open_append

fetch_prints: list[dict[str, Any]] = []  # [before, after] of the last armed fetch
_worker_on = [True]  # the worker probe (off after its first failure)


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
        fd = open_append(path, create=False)  # the parent's log, never created; no link
    except OSError:
        return
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _fetch_between_prints(original: Callable[..., Any], fetcher: Any, index: Any,
                          disable: Callable[[str, str, BaseException], None]) -> Any:
    """One main-process fetch with the RNGs fingerprinted before and after it."""
    try:
        before = rng_fingerprints()
    except Exception as e:  # noqa: BLE001 - the rng probe alone goes off
        disable("rng", "rng fingerprint", e)
        return original(fetcher, index)
    data = original(fetcher, index)
    try:
        fetch_prints[:] = [before, rng_fingerprints()]
    except Exception as e:  # noqa: BLE001
        disable("rng", "rng fingerprint", e)
    return data


def rng_fields() -> dict[str, Any]:
    """An ``rng`` event's fields: the RNG states' fingerprints now; for a batch fetched in
    this process the states before its fetch and the generators the fetch drew from; the
    framework that seeds every rank alike on purpose, if any."""
    extra: dict[str, Any] = {}
    if fetch_prints:
        before, after = fetch_prints
        extra["fetch_before"] = before
        extra["fetch_drew"] = [k for k in ("torch", "numpy", "python")
                               if k in after and before.get(k) != after[k]]
        fetch_prints.clear()
    framework = seeding_framework()
    if framework:
        extra["framework"] = framework
        if framework == lightning.FRAMEWORK.name:
            extra["seed_workers"] = lightning.seeds_workers(os.environ)
    return {**rng_fingerprints(), **extra}


def arm(fetcher: Any, disable: Callable[[str, str, BaseException], None]) -> None:
    """The fetcher's next fetch fingerprints the RNGs around itself (an override on the
    fetcher object, gone after that fetch or at ``disarm``)."""
    original = type(fetcher).fetch

    def fetch(possibly_batched_index: Any) -> Any:
        fetcher.__dict__.pop("fetch", None)
        return _fetch_between_prints(original, fetcher, possibly_batched_index, disable)

    fetcher.__dict__["fetch"] = fetch


def disarm(fetcher: Any) -> None:
    """An armed fetch that never came (the epoch ended first)."""
    if fetcher is not None:
        fetcher.__dict__.pop("fetch", None)


def patch_fetcher(cls: Any, get_info: Callable[[], Any]) -> None:
    """Patch a dataset fetcher class for the worker probe (in a DataLoader worker: did its
    first fetch draw randomness?)."""
    original = cls.fetch
    if getattr(original, "__ddpdoctor_original__", None) is not None:
        return

    @functools.wraps(original)
    def fetch(self: Any, possibly_batched_index: Any) -> Any:
        if _WorkerProbe.done or not _worker_on[0]:
            return original(self, possibly_batched_index)
        _WorkerProbe.done = True
        try:
            info = get_info()
            before = rng_fingerprints() if info is not None else None
        except Exception:  # noqa: BLE001 - a worker has no log of its own to tell
            _worker_on[0] = False
            before = None
        data = original(self, possibly_batched_index)
        if before is not None:
            try:
                after = rng_fingerprints()
                _worker_note(info, [k for k in ("torch", "numpy", "python")
                                    if k in after and before.get(k) != after[k]], before)
            except Exception:  # noqa: BLE001
                _worker_on[0] = False
        return data

    fetch.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls.fetch = fetch


def patch_worker_fetchers() -> None:
    """Patch torch's fetcher classes for the worker probe (in a process that may be a
    DataLoader worker: a forked or spawned child of a rank)."""
    try:
        from torch.utils.data import get_worker_info
        from torch.utils.data._utils import fetch
    except Exception:  # noqa: BLE001 - no torch here: nothing to probe
        return
    for cls in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):
        patch_fetcher(cls, get_worker_info)


def after_fork() -> None:
    """A forked process (perhaps a DataLoader worker) starts its worker probe afresh."""
    _WorkerProbe.done = False
    if "torch.utils.data" in sys.modules:
        patch_worker_fetchers()
