"""A job torchrun restarts once: in its first attempt rank 1 raises; the second runs clean
(FAIL_EVERY_ATTEMPT=1: rank 1 raises in every attempt)."""

import datetime
import os

import torch
import torch.distributed as dist


def main() -> None:
    torch.set_num_threads(1)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # each attempt's keys under a prefix of their own: in the launcher's store, keys an
    # earlier attempt left (a dead rank's address) can be read by a restarted rank first
    store = dist.PrefixStore(f"attempt-{attempt}", dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False,
        timeout=datetime.timedelta(seconds=60)))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    for _ in range(3):
        dist.all_reduce(torch.ones(10))
    if rank == 1 and (attempt == 0 or os.environ.get("FAIL_EVERY_ATTEMPT")):
        raise RuntimeError(f"rank {rank} fails in attempt {attempt}")
    dist.all_reduce(torch.ones(5))
    dist.barrier()
    print(f"rank {rank} done in attempt {attempt}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
