"""An async collective whose work fails is recorded as failed, not as completed: its
future's error reaches the record, whichever of the future's callback or the user's
``wait()`` sees the completion first."""

from __future__ import annotations

import torch

from ddpdoctor.runtime import patches


class _Ends:
    """Stands in for the rank's recorder: the ends it was told."""

    def __init__(self) -> None:
        self.ended: list[tuple[int, bool]] = []

    def end(self, handle: int, failed: bool = False) -> None:
        self.ended.append((handle, failed))


class _Work:
    """A Work with a real torch future (what gloo's Work gives ``get_future()``)."""

    def __init__(self) -> None:
        self.fut: torch.futures.Future = torch.futures.Future()

    def get_future(self) -> torch.futures.Future:
        return self.fut


def test_a_failed_async_work_is_recorded_failed() -> None:
    rec, work = _Ends(), _Work()
    patches._track_async(rec, work, 7)  # type: ignore[arg-type]
    work.fut.set_exception(RuntimeError("Connection closed by peer"))
    assert rec.ended == [(7, True)]


def test_a_completed_async_work_is_recorded_completed_once() -> None:
    rec, work = _Ends(), _Work()
    patches._track_async(rec, work, 8)  # type: ignore[arg-type]
    work.fut.set_result([torch.ones(2)])
    del work  # the finalizer must not end it a second time
    assert rec.ended == [(8, False)]
