# Rank 0 saves the checkpoint to flaky storage with retry + backoff; the first
# attempt fails with a transient error, the second succeeds.  Other ranks wait
# at a barrier meanwhile.
import os
import shutil
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

WORK = os.path.join("/tmp/set4_work", os.path.splitext(os.path.basename(__file__))[0])


class FlakyStore:
    def __init__(self):
        self.calls = 0

    def put(self, obj, path):
        self.calls += 1
        if self.calls == 1:
            raise OSError(5, "Input/output error (storage gateway busy)")
        torch.save(obj, path)


def save_with_retry(store, obj, path, retries=5):
    delay = 3.0
    for attempt in range(1, retries + 1):
        try:
            store.put(obj, path)
            return attempt
        except OSError as e:
            print(f"save attempt {attempt} failed: {e}; retrying in {delay:.0f}s", flush=True)
            time.sleep(delay)
            delay *= 2
    raise RuntimeError("checkpoint save failed")


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        shutil.rmtree(WORK, ignore_errors=True)
        os.makedirs(WORK)
    torch.manual_seed(0)
    model = DDP(nn.Linear(10, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    store = FlakyStore()
    for epoch in range(2):
        for step in range(4):
            g = torch.Generator().manual_seed(epoch * 50 + rank * 10 + step)
            x = torch.randn(8, 10, generator=g)
            loss = F.mse_loss(model(x), x.flip(1))
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            n = save_with_retry(store, model.module.state_dict(), os.path.join(WORK, f"ckpt_{epoch}.pt"))
            print(f"epoch {epoch} saved after {n} attempt(s)", flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
