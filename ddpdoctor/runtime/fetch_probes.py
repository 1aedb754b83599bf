"""Probes at the dataset fetch: the indices of each fetch, the RNG states around an armed
fetch (what a batch's augmentation drew), and whether a DataLoader worker's first fetch
consumed randomness (a ``worker_rng`` line in the parent rank's meta log)."""

from __future__ import annotations

import functools
import json
import os
import time
from typing import Any, Callable

from ddpdoctor.runtime import recorder as R
from ddpdoctor.runtime.data_fingerprints import rng_fingerprints

armed = [False]  # the next main-process fetch fingerprints the RNGs around itself
fetch_prints: list[dict[str, Any]] = []  # [before, after] of the last armed fetch
last_index: list[Any] = [None]  # the indices of the last fetch in this process
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
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)  # the parent's log, never created
    except OSError:
        return
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _fetch_between_prints(original: Callable[..., Any], fetcher: Any, index: Any,
                          disable: Callable[[str, str, BaseException], None]) -> Any:
    """One main-process fetch with the RNGs fingerprinted before and after it."""
    armed[0] = False
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


def patch_fetcher(cls: Any, get_info: Callable[[], Any],
                  disable: Callable[[str, str, BaseException], None]) -> None:
    """Patch a dataset fetcher: the indices of each fetch, the RNGs around an armed fetch,
    and a worker's first fetch (did it draw randomness?)."""
    original = cls.fetch

    @functools.wraps(original)
    def fetch(self: Any, possibly_batched_index: Any) -> Any:
        last_index[0] = possibly_batched_index
        if armed[0]:
            return _fetch_between_prints(original, self, possibly_batched_index, disable)
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


def after_fork() -> None:
    """A forked process (a DataLoader worker) starts its worker probe afresh."""
    _WorkerProbe.done = False
