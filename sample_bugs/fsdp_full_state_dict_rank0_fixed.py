#!/usr/bin/env python
"""The fixed twin of fsdp_full_state_dict_rank0.py: every rank calls state_dict() (the
gather is collective); only rank 0 saves.
Run: torchrun --nproc-per-node 2 fsdp_full_state_dict_rank0_fixed.py
"""
import datetime
import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    model = FSDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)),
                 device_id=torch.device("cpu"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    config = FullStateDictConfig(rank0_only=True)
    for step in range(4):
        model(torch.randn(4, 8, generator=g)).square().mean().backward()
        opt.step()
        opt.zero_grad()
        if step == 1:
            with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, config):
                state = model.state_dict()  # FIX: every rank takes part in the gather
            if rank == 0:
                torch.save(state, os.path.join(tempfile.mkdtemp(), "ckpt.pt"))
    print(f"rank {rank}: done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
