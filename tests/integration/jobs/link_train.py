"""A tiny DDP training loop, one rank a node, for the stalled-link test.

LINK_PAUSE_DIR (set on one node only): that node's rank writes ``ready`` there after step
PAUSE_AT and waits for a ``go`` file before its next step; the test cuts the link between
the hosts in that pause (or does not).  The others go on into the next step's gradient
all-reduce and wait there for it.  GLOO_TIMEOUT_S: the process group's timeout (gloo
would otherwise give up only after 30 minutes)."""

import datetime
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

STEPS = int(os.environ.get("STEPS", "12"))
PAUSE_AT = 4
PAUSE_DIR = os.environ.get("LINK_PAUSE_DIR")

dist.init_process_group(
    "gloo", timeout=datetime.timedelta(seconds=float(os.environ.get("GLOO_TIMEOUT_S", "300"))))
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(256, 256), nn.ReLU(),
                                                          nn.Linear(256, 8)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
gen = torch.Generator().manual_seed(dist.get_rank())
for step in range(STEPS):
    x = torch.randn(16, 256, generator=gen)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if PAUSE_DIR and step == PAUSE_AT:
        Path(PAUSE_DIR, "ready").write_text(str(step))
        while not Path(PAUSE_DIR, "go").exists():
            time.sleep(0.05)
print(f"rank {dist.get_rank()}: {STEPS} steps, loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
