"""Several repro scripts replayed one after another by the ranks of one torchrun job.

Usage: torchrun --nproc-per-node N replay_batch.py REPRO.py...  Each repro's ``main()`` runs
in a process group of its own: its ``init_process_group`` gets a store under a prefix of its
own (so no key of one replay is read by the next), and the group is destroyed when it
returns.  Prints ``replayed NAME`` on rank 0 after each; an exception ends the rank (and
the job) with the repro's traceback, a hang hangs the job.
"""

import functools
import os
import runpy
import sys

import torch.distributed as dist

from ddpdoctor.runtime import gloo_teardown


KEPT: list = []  # every replay's module and groups, alive until the process ends: torch
# 2.13's gloo deadlocks when a DDP's reducer frees its group while the GIL is held (the
# freed group's worker needs the GIL), and aborts when a group is freed at exit


def replay(path: str, index: int, store: dist.Store, rank: int, world: int) -> None:
    """Run one repro's main() on its own store prefix, then destroy its groups."""
    init = dist.init_process_group
    dist.init_process_group = functools.partial(  # the repro calls dist.init_process_group
        init, store=dist.PrefixStore(f"replay{index}", store), rank=rank, world_size=world)
    try:
        module = runpy.run_path(path, run_name="replayed")
        KEPT.append(module)
        module["main"]()
    finally:
        dist.init_process_group = init
    if dist.is_initialized():
        dist.barrier()
        KEPT.append(gloo_teardown.live_groups())
        dist.destroy_process_group()


def main() -> None:
    store, rank, world = next(dist.rendezvous("env://"))
    for index, path in enumerate(sys.argv[1:]):
        replay(path, index, store, rank, world)
        if rank == 0:
            print(f"replayed {os.path.basename(os.path.dirname(path))}", flush=True)
    gloo_teardown.settle()
    os._exit(0)  # every replay ended: no interpreter teardown to free what KEPT holds


if __name__ == "__main__":
    main()
