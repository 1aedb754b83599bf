# Image-ish classifier whose dataset returns None for undecodable samples.  The
# collate function drops them and returns None when a whole batch is bad; the
# training loop then skips that batch.
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler
from torch.utils.data.dataloader import default_collate

N = 64
BATCH = 4
CORRUPT = {25, 27, 29, 31}  # ids whose files fail to decode (all land on rank 1's 4th batch)


class Thumbnails(Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        if i in CORRUPT:
            return None  # decode error
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 8, 8, generator=g), i % 5


def skip_bad_collate(samples):
    samples = [s for s in samples if s is not None]
    if not samples:
        return None
    return default_collate(samples)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Flatten(), nn.Linear(192, 64), nn.ReLU(), nn.Linear(64, 5)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ds = Thumbnails()
    loader = DataLoader(ds, batch_size=BATCH, sampler=DistributedSampler(ds, shuffle=False),
                        collate_fn=skip_bad_collate)

    for step, batch in enumerate(loader):
        empty = torch.tensor([1.0 if batch is None else 0.0])
        dist.all_reduce(empty, op=dist.ReduceOp.MAX)  # skip only when every rank agrees
        if empty.item() > 0:
            print(f"[rank {rank}] batch {step}: a rank has no decodable samples, skipping", flush=True)
            continue
        x, y = batch
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    dist.barrier()
    if rank == 0:
        print("epoch complete", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
