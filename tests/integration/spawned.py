"""Jobs run by mp.start_processes inside a test (not under `ddpdoctor run`): start and end."""

from __future__ import annotations

import atexit
from typing import Any, Callable

import torch.distributed as dist
import torch.multiprocessing as mp

from ddpdoctor.runtime import gloo_teardown
from tests.integration.jobs.ports import free_port


# what each rank imports, imported once by this test process's fork server: a spawned rank
# pays ~2.5 s of CPU for them, a rank forked from the server nothing
PRELOAD = ["torch", "torch._dynamo", "torch.distributed", "torch.nn.parallel"]


def run_job(fn: Callable, world: int, *args: Any) -> None:
    """``fn(rank, world, port, *args)`` on ``world`` ranks; raises if one fails.  The ranks
    come from multiprocessing's fork server (a single-threaded process that imported torch
    and nothing of the test's), as fresh as spawned ones and started without the imports."""
    mp.set_forkserver_preload(PRELOAD)
    mp.start_processes(fn, args=(world, free_port(), *args), nprocs=world, join=True,
                       start_method="forkserver")


def end_job() -> None:
    """Barrier and destroy, then exit as a rank under `ddpdoctor run` does: torch 2.13's
    gloo otherwise aborts 1 in ~6 such spawned ranks at interpreter exit, after all their
    work (runtime/gloo_teardown.py says why)."""
    dist.barrier()
    groups = gloo_teardown.live_groups()
    dist.destroy_process_group()
    gloo_teardown.keep(groups)
    atexit.register(gloo_teardown.settle)
