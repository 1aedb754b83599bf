"""Replica fingerprints: a cheap per-tensor print that any bit difference changes, and the
schedule of the optimizer steps at which every rank takes them.

A tensor's print is ``[bits, norm]``: ``bits`` is the sum, with 64-bit wrap-around, of its
bytes read as int64 words (integer addition is associative, so bit-identical tensors give
the same sum on any device, in any reduction order, and one flipped bit changes it);
``norm`` is its L2 norm (floating tensors only), which says by how much two prints differ
but is never compared for equality (a float reduction may depend on the thread count).
Both are computed where the tensor lives, one device-to-host copy per device and dtype.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

BUDGET = 0.005  # the share of a step the prints may cost, amortised over the interval
MIN_EVERY = 16
MAX_EVERY = 4096
DECIDE_AT = 16  # the step after which the interval is chosen from measured costs
LOG_BUDGET = 8 << 20  # meta log bytes of checks a rank writes before its interval doubles


def bit_sum(t: Any) -> Any:
    """The 0-d int64 tensor: the tensor's bytes read as int64 words, summed with wrap-around
    (a tail of fewer than 8 bytes added byte by byte)."""
    import torch

    raw = t.detach().reshape(-1).view(torch.uint8)
    n = raw.numel()
    n8 = n - n % 8
    if n8:
        head = raw[:n8]
        try:
            words = head.view(torch.int64)
        except RuntimeError:  # not 8-byte aligned in its storage
            words = head.clone().view(torch.int64)
        total = words.sum()
    else:
        total = torch.zeros((), dtype=torch.int64, device=t.device)
    if n8 < n:
        total = total + raw[n8:].to(torch.int64).sum()
    return total


def fingerprints(tensors: Sequence[Any]) -> list[list[Any] | None]:
    """``[bits, norm]`` per tensor (``norm`` None for a tensor that is not floating point;
    None for a missing tensor or one that cannot be read)."""
    import torch

    out: list[list[Any] | None] = [None] * len(tensors)
    groups: dict[tuple[Any, Any], list[int]] = {}
    for i, t in enumerate(tensors):
        if t is not None:
            groups.setdefault((t.device, t.dtype), []).append(i)
    with torch.no_grad():
        for (_, dtype), idx in groups.items():
            _group_prints([tensors[i] for i in idx], dtype, idx, out)
    return out


def _group_prints(ts: list[Any], dtype: Any, idx: list[int],
                  out: list[list[Any] | None]) -> None:
    import torch

    try:
        bits = torch.stack([bit_sum(t) for t in ts]).tolist()
    except RuntimeError:  # a tensor that cannot be viewed as bytes (sparse, meta, ...)
        return
    norms: list[Any] = [None] * len(ts)
    if dtype.is_floating_point:
        try:
            norms = [n if math.isfinite(n) else None for n in
                     torch.stack(torch._foreach_norm(ts)).double().tolist()]
        except RuntimeError:
            pass
    for i, b, n in zip(idx, bits, norms):
        out[i] = [b, n]


def is_power_of_two(step: int) -> bool:
    return step > 0 and step & (step - 1) == 0


def every_for(check_s: float, step_s: float, budget: float = BUDGET) -> int:
    """The interval (a power of two, MIN_EVERY to MAX_EVERY) at which prints that cost
    ``check_s`` a check stay within ``budget`` of steps of ``step_s``."""
    if step_s <= 0 or check_s <= 0:
        return MIN_EVERY
    want = check_s / (budget * step_s)
    every = MIN_EVERY
    while every < want and every < MAX_EVERY:
        every *= 2
    return every


class CheckSchedule:
    """Which optimizer steps are checked: every power of two (dense early in the run), and,
    once chosen, every multiple of ``every``.  Ranks that choose different intervals (each
    measures its own costs) still share the powers of two and the multiples of the largest
    interval, since every interval is a power of two."""

    def __init__(self, every: int | None = None):
        self.every = every  # None: not chosen yet
        self.fixed = every is not None
        self._step_times: list[float] = []
        self._check_times: list[float] = []
        self.logged = 0  # bytes of checks written so far
        self._log_budget = LOG_BUDGET

    def is_check(self, step: int) -> bool:
        if step <= 0:
            return False
        every = self.every
        return is_power_of_two(step) or (every is not None and every > 0 and step % every == 0)

    def note_step(self, step: int, step_s: float) -> None:
        """The wall time since the previous optimizer step (the step's cost)."""
        if not self.fixed and 1 < step <= DECIDE_AT:
            self._step_times.append(step_s)

    def note_logged(self, nbytes: int) -> None:
        """Checks written to the meta log: past each budget (doubled every time) the interval
        doubles, so that a long run of a model with many tensors logs O(log steps) checks'
        worth, not O(steps); still a power of two, so ranks keep sharing checked steps."""
        self.logged += nbytes
        if self.logged > self._log_budget and self.every is not None and \
                self.every < MAX_EVERY:
            self.every *= 2
            self._log_budget *= 2

    def note_check(self, step: int, check_s: float) -> None:
        """What a check cost; after DECIDE_AT the interval is chosen (once)."""
        if step > 2:  # the first checks pay for warm-up
            self._check_times.append(check_s)
        if not self.fixed and self.every is None and step >= DECIDE_AT:
            steps = sorted(self._step_times)
            step_s = steps[len(steps) // 2] if steps else 0.0
            checks = sorted(self._check_times)
            check_s = checks[len(checks) // 2] if checks else check_s  # not the luckiest
            self.every = every_for(check_s, step_s)
