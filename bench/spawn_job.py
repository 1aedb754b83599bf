"""Run one function on every rank of a local gloo job and collect rank 0's answer."""

from __future__ import annotations

import queue
import socket
from typing import Any, Callable

import torch.multiprocessing as mp

TRIES = 3  # another job may take the chosen port before rank 0 listens on it


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(target: Callable[..., None], world: int, *args: Any,
              timeout: float = 1800) -> Any:
    """Start ``target(rank, world, port, *args, out)`` on ``world`` processes and return
    what rank 0 puts on ``out``; a rank that dies fails the job at once (and a port
    taken by someone else is retried), rather than leaving the caller waiting."""
    for attempt in range(TRIES):
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        port = free_port()
        procs = [ctx.Process(target=target, args=(r, world, port, *args, out))
                 for r in range(world)]
        for p in procs:
            p.start()
        try:
            waited = 0.0
            while waited < timeout:
                try:
                    return out.get(timeout=2)
                except queue.Empty:
                    waited += 2
                if any(p.exitcode not in (None, 0) for p in procs):
                    break
            else:
                raise RuntimeError(f"no answer from the {world}-rank job in {timeout:.0f} s")
        finally:
            for p in procs:
                p.join(timeout=60)
                if p.is_alive():
                    p.kill()
    raise RuntimeError(f"a rank of the {world}-rank job died ({TRIES} tries)")
