# Streaming training: each rank reads its own pre-sharded record file through an
# IterableDataset (no DistributedSampler).  The shard writer did not balance the
# record counts, so the last shard is shorter.
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset

RECORDS_PER_SHARD = [24, 24, 24, 18]  # shard-00003 came out short
BATCH = 6


class ShardStream(IterableDataset):
    def __init__(self, shard_id):
        self.shard_id = shard_id

    def __iter__(self):
        g = torch.Generator().manual_seed(self.shard_id)
        for _ in range(RECORDS_PER_SHARD[self.shard_id]):
            x = torch.randn(10, generator=g)
            yield x, (x.sum() > 0).long()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(ShardStream(shard_id=rank), batch_size=BATCH)

    seen = 0
    running = torch.zeros(1)
    with Join([model]):  # ranks that run out of data shadow the others' gradient all-reduces
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.detach()
            seen += 1

    # end-of-epoch logging: mean train loss across ranks
    dist.all_reduce(running)
    if rank == 0:
        print(f"epoch mean loss {running.item() / (seen * dist.get_world_size()):.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
