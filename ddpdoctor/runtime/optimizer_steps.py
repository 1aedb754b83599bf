"""Which optimizer step hooks belong to the outermost step: the one the user's loop called.

torch runs the global optimizer step hooks around every ``Optimizer.step`` of every optimizer
subclass, so one step of the user's loop can fire them more than once: a
``ZeroRedundancyOptimizer`` steps its local optimizer on the rank's shard, then broadcasts
the shards (the replicas agree only after that); a subclass whose ``step`` calls
``super().step()`` fires them twice for one object.  Only the outermost step's post hook is
the point where the replicas are meant to agree and where a step is counted.

``OuterSteps.enter`` (the pre hook) and ``OuterSteps.leave`` (the post hook) keep the frames
of the steps under way; a step whose post hook never ran (it raised) is dropped when the next
step starts outside it.  A frame walk only while a step is already under way: nothing extra
on a plain step's path.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any


class OuterSteps:
    """The optimizer steps under way in this thread, outermost first."""

    def __init__(self) -> None:
        self._frames: list[FrameType] = []
        self.outer: Any = None  # the optimizer of the outermost step under way

    def enter(self, optimizer: Any, frame: FrameType) -> bool:
        """A step's pre hook, ``frame`` the step's wrapper: True for an outermost step."""
        if self._frames:
            live = _ancestors(frame)
            self._frames = [f for f in self._frames if id(f) in live]
        self._frames.append(frame)
        if len(self._frames) == 1:
            self.outer = optimizer
            return True
        return False

    def leave(self, frame: FrameType) -> bool:
        """A step's post hook: True when it ends the outermost step under way."""
        for i in range(len(self._frames) - 1, -1, -1):
            if self._frames[i] is frame:
                del self._frames[i:]
                break
        else:
            return not self._frames  # a step entered before the hooks: outermost if alone
        return not self._frames


def _ancestors(frame: FrameType | None) -> set[int]:
    out = set()
    while frame is not None:
        out.add(id(frame))
        frame = frame.f_back
    return out


_steps = OuterSteps()


def entered(optimizer: Any) -> bool:
    """Called by the global pre hook: is this the outermost step?"""
    return _steps.enter(optimizer, sys._getframe(2))


def left() -> bool:
    """Called by the global post hook: did the outermost step just end?"""
    return _steps.leave(sys._getframe(2))
