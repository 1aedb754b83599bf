"""Per-iterator hooks of the data probes, set on one DataLoader iterator object (never its
class) and taken off again, so that an epoch's batches past its first ones run torch's
own code alone.

- The batch hook: an override of the iterator's ``_next_data`` (torch's ``__next__`` calls
  it for each batch) that sees each batch and the epoch's StopIteration.  It holds the
  iterator weakly: an iterator the user drops is freed (its workers stopped) as without
  ddpdoctor.
- The sampler tap: the iterator's ``_sampler_iter`` (where torch draws each batch's
  indices) wrapped by a generator that passes the first ``first`` index lists to a
  callback, then delegates (``yield from``: no Python a batch), and calls back once when
  the sampler runs dry: the epoch's end (one process) or its last batches in flight
  (workers).
"""

from __future__ import annotations

import collections
import weakref
from typing import Any, Callable, Iterator

BatchFn = Callable[[Any, Any, Any], None]  # (iterator, batch, the hook)
StopFn = Callable[[Any, Any], None]  # (iterator, the hook)
BeforeFn = Callable[[Any], None]  # (iterator), before each batch the hook sees


class BatchHook:
    """The override of one iterator's ``_next_data``: a callable object that holds the
    iterator weakly and nothing that holds it (no reference cycle: the iterator and its
    hook go as the loop drops them, without waiting for the garbage collector)."""

    __slots__ = ("ref", "original", "on_batch", "on_stop", "before")

    def __init__(self, it: Any, on_batch: BatchFn, on_stop: StopFn, before: BeforeFn):
        self.ref = weakref.ref(it)
        self.original = type(it)._next_data
        self.on_batch, self.on_stop, self.before = on_batch, on_stop, before

    def __call__(self) -> Any:
        it = self.ref()  # alive: torch's __next__ is running on it
        self.before(it)
        try:
            data = self.original(it)
        except StopIteration:
            self.on_stop(it, self)
            raise
        self.on_batch(it, data, self)
        return data


def arm(it: Any, on_batch: BatchFn, on_stop: StopFn, before: BeforeFn) -> BatchHook:
    """Route the iterator's batches through ``on_batch`` (and its end through ``on_stop``)
    until ``disarm``; returns the hook."""
    hook = BatchHook(it, on_batch, on_stop, before)
    it.__dict__["_next_data"] = hook
    return hook


def disarm(it: Any, hook: BatchHook) -> None:
    """Take the hook off the iterator (if it is still the one set)."""
    if it is not None and it.__dict__.get("_next_data") is hook:
        del it.__dict__["_next_data"]


class SamplerTap:
    """One epoch's index stream: the first index lists' prints, and whether it ran dry."""

    __slots__ = ("iter_ref", "gen_ref", "prints", "drawn", "first", "dry", "ep", "on_draw",
                 "on_dry")

    def __init__(self, it: Any, first: int, on_draw: Callable[["SamplerTap", Any], None],
                 on_dry: Callable[["SamplerTap"], None]):
        self.iter_ref = weakref.ref(it)
        self.prints: collections.deque = collections.deque()  # (fingerprint, size) FIFO
        self.drawn = 0  # index lists drawn, counted up to ``first``
        self.first = first
        self.dry = False
        self.ep: Any = None  # the LoaderEpoch, once it exists (workers draw ahead of it)
        self.on_draw = on_draw
        self.on_dry = on_dry
        self.gen_ref: Any = None  # the generator (weakly: its frame holds this state)


def _tapped(inner: Iterator[Any], tap: SamplerTap) -> Iterator[Any]:
    for index in inner:
        tap.drawn += 1
        tap.on_draw(tap, index)
        yield index
        if tap.drawn >= tap.first:
            break
    yield from inner
    tap.dry = True
    tap.on_dry(tap)


def tap(it: Any, first: int, on_draw: Callable[[SamplerTap, Any], None],
        on_dry: Callable[[SamplerTap], None]) -> SamplerTap:
    """Wrap the iterator's sampler iterator (before anything is drawn from it)."""
    t = SamplerTap(it, first, on_draw, on_dry)
    gen = _tapped(it._sampler_iter, t)
    t.gen_ref = weakref.ref(gen)
    it._sampler_iter = gen
    it.__dict__["_ddpdoctor_tap"] = t
    return t


def tap_of(it: Any) -> SamplerTap | None:
    """The iterator's tap on its current sampler iterator, if any."""
    t = it.__dict__.get("_ddpdoctor_tap")
    gen = it.__dict__.get("_sampler_iter")
    return t if t is not None and gen is not None and t.gen_ref() is gen else None
