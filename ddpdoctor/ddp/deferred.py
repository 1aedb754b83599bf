"""DDP bucket futures completed on the backward's thread at the last bucket, not on gloo's.

Where ``--ddp torch`` is a hook (CPU buckets on another backend than gloo; on gloo it is
torch's reducer on a recording group, ddp/recorded_group.py), the hook launches each
bucket's all-reduce and must hand the reducer a Python Future. Completing it with
``work.get_future().then(...)`` runs Python on gloo's thread once a bucket (it takes the GIL
while backward wants it: 1.03-1.05 x torch's C++ hook a step at 3x512, against 1.01-1.03
this way). Here the futures of CPU buckets are completed by the hook of the round's last
bucket, which waits for every launched bucket in order (torch's reducer waits for them only
after that hook, in finalize_backward, and Join's shadow pass calls every hook before it
waits). A round whose last bucket never comes (an unused parameter without
find_unused_parameters, an exception inside backward) is settled at the next optimizer step
or the next round's first hook: what is done is completed there, what is not completes on
gloo's thread as before.
"""

from __future__ import annotations

import functools
import weakref
from typing import Callable

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

_active: "weakref.WeakSet[Deferred]" = weakref.WeakSet()
_step_hook: object | None = None


class _Entry:
    __slots__ = ("work", "fut", "buf", "handle", "index")

    def __init__(self, work: object, fut: torch.futures.Future, buf: torch.Tensor,
                 handle: int, index: int):
        self.work, self.fut, self.buf, self.handle, self.index = work, fut, buf, handle, index


class Deferred:
    """The launched, not yet completed bucket all-reduces of one DDP reducer, in order;
    ``end(handle, failed)`` closes a bucket's record."""

    def __init__(self, end: Callable[..., None]):
        self._end = end
        self._entries: list[_Entry] = []

    def launch(self, work: object, buf: torch.Tensor, handle: int, index: int,
               is_last: bool) -> torch.futures.Future:
        """The reducer's Future for bucket ``index`` whose all-reduce ``work`` is running."""
        if self._entries and self._entries[-1].index >= index:
            self.settle(wait=False)  # a round whose last bucket never came
        fut: torch.futures.Future = torch.futures.Future()
        self._entries.append(_Entry(work, fut, buf, handle, index))
        if is_last:
            self.settle(wait=True)
        elif len(self._entries) == 1:  # a round's first bucket
            _watch(self)
        return fut

    def settle(self, wait: bool) -> None:
        """Complete the launched buckets in order: all of them (waiting) when ``wait``, else
        those done, the others on gloo's thread when they are.  After a failure the rest
        fail with it, and when waiting it is raised: from the last bucket's hook, backward
        raises the group's own error, as under torch's C++ hook."""
        entries, self._entries = self._entries, []
        failure: BaseException | None = None
        for e in entries:
            if failure is not None:
                self._fail(e, failure)
            elif wait or e.work.is_completed():  # type: ignore[attr-defined]
                failure = self._complete(e)
            else:
                e.work.get_future().then(  # type: ignore[attr-defined]
                    functools.partial(self._complete_later, e))
        if failure is not None and wait:
            raise failure

    def _complete(self, e: _Entry) -> BaseException | None:
        return self._finish(e, e.work.wait)  # type: ignore[attr-defined]

    def _complete_later(self, e: _Entry, done: torch.futures.Future) -> None:
        self._finish(e, done.value)

    def _finish(self, e: _Entry, result: Callable[[], object]) -> BaseException | None:
        """Complete ``e`` once ``result()`` returns; its error, if it raises, fails ``e``."""
        try:
            result()
        except BaseException as exc:  # noqa: BLE001 - handed to the reducer via the future
            self._fail(e, exc)
            return exc
        self._end(e.handle)
        e.fut.set_result(e.buf)
        return None

    def _fail(self, e: _Entry, exc: BaseException) -> None:
        self._end(e.handle, failed=True)
        e.fut.set_exception(exc)


def _watch(d: Deferred) -> None:
    """Settle ``d`` at the next optimizer step if its round is still open then."""
    global _step_hook
    _active.add(d)
    if _step_hook is None:
        _step_hook = register_optimizer_step_post_hook(_settle_open)


def _settle_open(optimizer: object, args: object, kwargs: object) -> None:
    for d in list(_active):
        _active.discard(d)
        if d._entries:
            d.settle(wait=False)
