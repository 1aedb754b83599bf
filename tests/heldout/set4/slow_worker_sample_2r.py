# DataLoader with worker processes; one sample on rank 1's shard is very slow to
# decode (about 4 s), so rank 1 lags for a moment while rank 0 waits in the
# gradient all-reduce.  Then training continues normally.
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

SLOW_INDEX = 21  # a huge TIFF in the dataset; lands on rank 1


class Scans(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        if i == SLOW_INDEX:
            time.sleep(4.0)  # slow decode
        g = torch.Generator().manual_seed(i)
        x = torch.randn(12, generator=g)
        return x, int(x[0] > 0)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = Scans()
    loader = DataLoader(ds, batch_size=6, sampler=DistributedSampler(ds, shuffle=False), num_workers=1)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    if rank == 0:
        print("epoch done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
