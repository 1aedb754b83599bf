"""Jobs run by mp.start_processes inside a test (not under `ddpdoctor run`): start and end."""

from __future__ import annotations

import atexit
from typing import Any, Callable

import torch.distributed as dist
import torch.multiprocessing as mp

from ddpdoctor.runtime import gloo_teardown
from tests.robustness.helpers import free_port


def run_job(fn: Callable, world: int, *args: Any) -> None:
    """``fn(rank, world, port, *args)`` on ``world`` spawned ranks; raises if one fails."""
    mp.start_processes(fn, args=(world, free_port(), *args), nprocs=world, join=True,
                       start_method="spawn")


def end_job() -> None:
    """Barrier and destroy, then exit as a rank under `ddpdoctor run` does: torch 2.13's
    gloo otherwise aborts 1 in ~6 such spawned ranks at interpreter exit, after all their
    work (runtime/gloo_teardown.py says why)."""
    dist.barrier()
    groups = gloo_teardown.live_groups()
    dist.destroy_process_group()
    gloo_teardown.keep(groups)
    atexit.register(gloo_teardown.settle)
