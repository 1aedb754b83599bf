# Reconstructed from the reproduction in https://github.com/pytorch/pytorch/issues/54059
# (validation through the DDP model on GPU 0 only, then a barrier: the job hangs).
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def train(gpu, args):
    dist.init_process_group("nccl", rank=gpu, world_size=args.gpus)
    torch.cuda.set_device(gpu)
    model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.Flatten(), nn.LazyLinear(10))
    model = DDP(model.cuda(gpu), device_ids=[gpu])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    sampler = DistributedSampler(args.train_set)
    train_loader = DataLoader(args.train_set, batch_size=32, sampler=sampler)
    val_loader = DataLoader(args.val_set, batch_size=32)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for images, labels in train_loader:
            loss = nn.functional.cross_entropy(model(images.cuda(gpu)), labels.cuda(gpu))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if gpu == 0:
            model.eval()
            with torch.no_grad():
                for images, labels in val_loader:
                    outputs = model(images.cuda(gpu))
                    print((outputs.argmax(1) == labels.cuda(gpu)).float().mean())
        dist.barrier()


if __name__ == "__main__":
    mp.spawn(train, nprocs=2, args=(None,))
