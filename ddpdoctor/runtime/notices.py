"""Notices: what ddpdoctor cannot honour, said once on the console and once in the trace."""

from __future__ import annotations

import os
import sys
import threading

from ddpdoctor.runtime import recorder

_said: set[str] = set()
_lock = threading.Lock()


def _console_rank() -> bool:
    """Print on one rank only (rank 0, or a process outside any process group; before
    init_process_group, the rank its call names, which the recorder learned as it began,
    else the rank its launcher gave it in RANK: mp.spawn children have none)."""
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            return dist.get_rank() == 0
    except (ImportError, RuntimeError, ValueError):
        return True
    rec = recorder.existing()
    if rec is not None and rec.rank >= 0:
        return rec.rank == 0
    return os.environ.get("RANK", "0").strip() in ("0", "")


def notice(text: str, **fields: object) -> None:
    """Tell the user ``text`` once per process: ``ddpdoctor: notice: <text>`` on stderr (rank
    0) and a ``notice`` meta event that ends up in report["notices"].  Never raises."""
    with _lock:
        if text in _said:
            return
        _said.add(text)
    rec = recorder.active()
    if rec is not None:
        rec.meta("notice", text=text, **fields)
    if _console_rank():
        try:
            print(f"ddpdoctor: notice: {text}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass  # stderr closed: the meta event still carries it
