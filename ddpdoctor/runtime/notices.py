"""Notices: what ddpdoctor cannot honour, said once on the console and once in the trace."""

from __future__ import annotations

import sys
import threading

from ddpdoctor.runtime import recorder

_said: set[str] = set()
_lock = threading.Lock()


def _console_rank() -> bool:
    """Print on one rank only (rank 0, or a process outside any process group)."""
    try:
        import torch.distributed as dist

        return not dist.is_initialized() or dist.get_rank() == 0
    except (ImportError, RuntimeError, ValueError):
        return True


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
