"""The gather ring's reduction, the same on every rank: receive rows, then rank order."""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch

ReduceFn = Callable[[torch.Tensor, torch.Tensor], Any]

_scratch = threading.local()


def scratch(dtype: torch.dtype, numel: int) -> torch.Tensor:
    """A reusable receive buffer of at least ``numel`` elements (one per thread and dtype):
    a fresh large allocation each call costs page faults on every page."""
    bufs = _scratch.__dict__.setdefault("bufs", {})
    buf = bufs.get(dtype)
    if buf is None or buf.numel() < numel:
        buf = torch.empty(numel, dtype=dtype)
        bufs[dtype] = buf
    return buf[:numel]


def gather_rows(flat: torch.Tensor, n: int) -> torch.Tensor:
    """The ``n - 1`` receive rows of a gather ring (row ``k``: rank ``r - k - 1``'s tensor),
    in this thread's scratch buffer."""
    numel = flat.numel()
    return scratch(flat.dtype, (n - 1) * numel).view(n - 1, numel)


def reduce_in_rank_order(flat: torch.Tensor, rows: torch.Tensor, r: int, n: int,
                         reduce: ReduceFn, scale: float | None) -> None:
    """Reduce this rank's ``flat`` and the ``n - 1`` ``rows`` it received (row ``k``: rank
    ``r - k - 1``'s tensor) as ``((x0 . x1) . x2) ...`` into ``flat``, times ``scale``:
    the same operations on every rank, so the same result bits everywhere."""
    def row(q: int) -> torch.Tensor:
        return flat if q == r else rows[(r - q - 1) % n]

    if r <= 1:  # x0 . x1 == x1 . x0 bit for bit (every op here commutes): start in place
        acc = flat
        reduce(acc, row(1 - r))
    else:
        acc = rows[(r - 1) % n]  # rank 0's tensor
        reduce(acc, row(1))
    for q in range(2, n):
        reduce(acc, row(q))
    if scale is not None:
        torch.mul(acc, scale, out=flat)
    elif acc is not flat:
        flat.copy_(acc)
