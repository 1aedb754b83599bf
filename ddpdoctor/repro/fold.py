"""Folding a rank's repeating steps into loops: Loop, fold, item_key, lines_of."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence, Union

MAX_PERIOD = 256  # the longest loop body looked for, in steps


@dataclass(frozen=True)
class Loop:
    """``body`` repeated ``count`` times (count >= 2); the body may hold loops itself."""

    count: int
    body: tuple[Any, ...]


Item = Union[Loop, Any]  # a Loop, or one step (anything with a ``key()``, or hashable)


def _plain_key(item: Any) -> Hashable:
    return item.key() if hasattr(item, "key") else item


def item_key(item: Item, key: Callable[[Any], Hashable] = _plain_key) -> Hashable:
    """What makes two items the same: a step's key, a loop's count and body."""
    if isinstance(item, Loop):
        return ("loop", item.count, tuple(item_key(i, key) for i in item.body))
    return key(item)


def _run_length(keys: Sequence[Hashable], start: int, period: int) -> int:
    """How many items from ``start`` on equal the item ``period`` places after them."""
    n = 0
    end = len(keys) - period
    i = start
    while i < end and keys[i] == keys[i + period]:
        n += 1
        i += 1
    return n


def best_repeat(keys: Sequence[Hashable], start: int) -> tuple[int, int]:
    """The (period, count) of the repetition starting at ``start`` that covers the most
    items (the shortest period on a tie); (0, 0) when nothing repeats there."""
    best = (0, 0)
    covered = 0
    limit = min(MAX_PERIOD, (len(keys) - start) // 2)
    to_end = False  # the best repetition runs to the end: its multiples cover no more
    for period in range(1, limit + 1):
        if keys[start] != keys[start + period] or (to_end and period % best[0] == 0):
            continue
        run = _run_length(keys, start, period)
        count = 1 + run // period
        if count >= 2 and period * count > covered:
            best, covered = (period, count), period * count
            to_end = start + period + run == len(keys)
    return best


def fold(items: Sequence[Item], key: Callable[[Any], Hashable] = _plain_key) -> list[Item]:
    """The items with each repetition folded into a Loop, greedily from the front: at each
    position the repetition covering the most items wins, its body is folded in turn
    (nested loops), and the items after it (a differing tail) are folded the same way.
    A loop that saves no line (a body of n items repeated twice, n <= 1) stays unrolled."""
    ids: dict[Hashable, int] = {}  # each distinct key as a small int: cheap to compare
    keys = [ids.setdefault(item_key(i, key), len(ids)) for i in items]
    out: list[Item] = []
    i = 0
    while i < len(items):
        period, count = best_repeat(keys, i)
        if count >= 2 and period * count > period + 1:
            body = fold(items[i:i + period], key)
            out.append(_take_copies(out, Loop(count, tuple(body)), key))
            i += period * count
        else:
            out.append(items[i])
            i += 1
    return _refold(out, key)


def _take_copies(out: list[Item], loop: Loop, key: Callable[[Any], Hashable]) -> Loop:
    """A loop right after copies of its own body takes them in (removed from ``out``):
    returns the loop with its count raised by as many."""
    body = [item_key(b, key) for b in loop.body]
    count = loop.count
    while len(out) >= len(body) and [item_key(o, key) for o in out[-len(body):]] == body:
        del out[-len(body):]
        count += 1
    return Loop(count, loop.body)


def _refold(items: list[Item], key: Callable[[Any], Hashable]) -> list[Item]:
    """Equal loops side by side become one loop of the summed count."""
    out: list[Item] = []
    for item in items:
        prev = out[-1] if out else None
        if isinstance(item, Loop) and isinstance(prev, Loop) and \
                item_key(Loop(1, prev.body), key) == item_key(Loop(1, item.body), key):
            out[-1] = Loop(prev.count + item.count, prev.body)
        else:
            out.append(item)
    return out


def unfold(items: Sequence[Item]) -> list[Any]:
    """The steps the folded items stand for, in order (folding's inverse)."""
    out: list[Any] = []
    for item in items:
        if isinstance(item, Loop):
            body = unfold(item.body)
            for _ in range(item.count):
                out.extend(body)
        else:
            out.append(item)
    return out


def lines_of(items: Sequence[Item]) -> int:
    """How many lines the folded items take: a step one, a loop one plus its body."""
    return sum(1 + lines_of(i.body) if isinstance(i, Loop) else 1 for i in items)
