"""What the optimizers hold that replicas must share: each param group's scalar settings (lr,
weight_decay, betas, momentum, ...) and the user's line that last changed each of them.

A param group of an optimizer seen stepping becomes a ``WatchedGroup``: a dict that notes,
when a setting's value changes, the user's ``file:line`` that wrote it (an LR scheduler's
write is its ``step()`` call's line, handed in by runtime/replica_writes.py): the distinct
lines that changed each setting, the latest last (at most MAX_SITES).  It pickles and
copies as a plain dict, so a saved optimizer never needs ddpdoctor.  A write whose value does
not change (ZeRO copying its groups each step) costs one comparison.
"""

from __future__ import annotations

import sys
import zlib
from typing import Any

from ddpdoctor.runtime import callsites

HYPER_SKIP = frozenset({"params", "initial_lr", "param_names"})
_SCALARS = (bool, int, float, str, type(None))
MAX_SITES = 4
writer_site = ""  # the line of the scheduler step under way (replica_writes sets it)


class WatchedGroup(dict):
    """A param group that remembers the lines that changed each setting (``sites``)."""

    __slots__ = ("sites",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sites: dict[str, list[str]] = {}

    def __setitem__(self, key: Any, value: Any) -> None:
        old = dict.get(self, key, _MISSING)
        dict.__setitem__(self, key, value)
        if old is value or key in HYPER_SKIP or (type(old) in _SCALARS and old == value):
            return
        try:
            site = writer_site or callsites.user_site(sys._getframe(1))
            seen = self.sites.setdefault(key, [])
            if seen and seen[-1] == site:
                return
            if site in seen:
                seen.remove(site)
            elif len(seen) >= MAX_SITES:
                del seen[0]
            seen.append(site)
        except Exception:  # noqa: BLE001 - the user's write stands; only its line is lost
            pass

    def __reduce__(self) -> tuple[type, tuple[dict[Any, Any]]]:
        return (dict, (dict(self),))

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        import copy

        return copy.deepcopy(dict(self), memo)


_MISSING = object()


def watch_groups(optimizer: Any) -> None:
    """Make the optimizer's param groups WatchedGroups (again after a load_state_dict)."""
    groups = getattr(optimizer, "param_groups", None)
    if not isinstance(groups, list):
        return
    for i, g in enumerate(groups):
        if type(g) is dict:
            groups[i] = WatchedGroup(g)


def watch_new_group(optimizer: Any, site: str) -> None:
    """The group just added to ``optimizer``, watched, each setting noted at ``site`` (the
    user's line that built the optimizer or added the group)."""
    groups = getattr(optimizer, "param_groups", None)
    if isinstance(groups, list) and groups and type(groups[-1]) is dict:
        group = groups[-1] = WatchedGroup(groups[-1])
        if site:
            group.sites.update({k: [site] for k in group if isinstance(k, str)
                                and k not in HYPER_SKIP})


def _scalar(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (tuple, list)) and all(isinstance(v, (int, float)) for v in value):
        return list(value)
    if hasattr(value, "numel") and value.numel() == 1:
        return float(value.item())
    return None


def settings_print(optimizers: list[Any]) -> int:
    """A CRC-32 of every param group's scalar settings (equal settings give equal prints on
    every rank; one a step tells the step from which ranks' settings differ)."""
    rows = [sorted((k, v) for k, v in g.items() if type(v) in _SCALARS and type(k) is str)
            for opt in optimizers for g in opt.param_groups]
    return zlib.crc32(repr(rows).encode())


def param_ids(optimizer: Any) -> set[int]:
    """The ids of every parameter the optimizer holds."""
    return {id(p) for g in getattr(optimizer, "param_groups", ()) for p in g.get("params", ())}


def hyperparameters(optimizers: list[Any]) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """The scalar settings of every param group of ``optimizers`` (live ones, in order), with
    ``sites`` (setting -> the user's lines that changed it, the latest last) where known, and
    id(param) -> the index of its group in that list."""
    out: list[dict[str, Any]] = []
    where: dict[int, int] = {}
    for opt in optimizers:
        for gi, group in enumerate(opt.param_groups):
            row: dict[str, Any] = {"optimizer": type(opt).__name__, "group": gi}
            for k, v in sorted(group.items()):
                if k not in HYPER_SKIP and isinstance(k, str):
                    s = _scalar(v)
                    if s is not None:
                        row[k] = s
            sites = getattr(group, "sites", None)
            if sites:
                row["sites"] = {k: list(v) for k, v in sites.items() if k in row and v}
            for p in group["params"]:
                where.setdefault(id(p), len(out))
            out.append(row)
    return out, where
