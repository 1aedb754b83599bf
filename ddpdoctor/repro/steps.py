"""One replayed step of one rank (Step), and the user's call site it came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

from ddpdoctor.analysis.load import user_source


@dataclass(frozen=True)
class Step:
    """One replayed call of one rank; ``key()`` is what makes two steps the same.

    op: the torch.distributed function; group: its process group's name; peer: the root,
    destination or source (a global rank), -1 for none; slot: the async work's variable
    (``w<slot>``), -1 for a blocking call; wait: this step is ``w<slot>.wait()``.
    """

    op: str
    group: str
    reduce_op: str = ""
    in_shapes: tuple[tuple[int, ...], ...] = ()
    out_shapes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    peer: int = -1
    p2p: bool = False
    obj: bool = False
    bucket: int = -1
    slot: int = -1
    wait: bool = False
    site: str = ""  # train.py:42
    source: str = ""  # the user's source line at ``site``
    framework_site: str = ""
    ranked: bool = False  # the job made the call under a rank-dependent `if` (not in key())

    def key(self) -> tuple:
        return (self.op, self.group, self.reduce_op, self.in_shapes, self.out_shapes,
                self.dtypes, self.peer, self.p2p, self.obj, self.bucket, self.slot, self.wait,
                self.site, self.framework_site)


def source_line(callsite: str) -> str:
    """The user's line of code at ``callsite`` (path:line), stripped; "" if unreadable."""
    path, _, line = callsite.rpartition(":")
    if not path or not line.isdigit():
        return ""
    return user_source.line_of(path, int(line)).strip()[:100]
