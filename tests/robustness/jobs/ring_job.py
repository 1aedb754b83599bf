"""Two ranks train a small model under DDP; rank 1 reaches the first all-reduce RIGHT_LATE_S
late; the rank GLOO_ON_RANK asks for the ring over gloo."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if os.environ.get("GLOO_ON_RANK") == str(rank):  # this rank alone asks for gloo's send/recv
    os.environ["DDPDOCTOR_RING_TRANSPORT"] = "gloo"
torch.manual_seed(0)
model = torch.nn.Linear(64, 8)
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
g = torch.Generator().manual_seed(rank)
for step in range(20):
    loss = ddp(torch.randn(32, 64, generator=g)).pow(2).mean()
    if step == 0 and rank == 1:
        time.sleep(float(os.environ.get("RIGHT_LATE_S", "0")))
    loss.backward()
    opt.step()
    opt.zero_grad()
if rank == 0:
    print("checksum %.6f" % sum(p.double().sum().item() for p in model.parameters()))
dist.destroy_process_group()
