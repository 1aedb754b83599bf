#!/usr/bin/env python
"""FSDP: a full state dict taken on rank 0 only.

Rank 0 saves a checkpoint after step 1 under `if rank == 0:`, taking the model's full state
dict (`FULL_STATE_DICT`, `rank0_only=True`). Gathering a sharded model's full state dict is a
collective: every rank must call `state_dict()`, and only rank 0 keeps the result. Rank 1 goes
on to the next step, whose forward all-gathers the parameters: the ranks' collectives part
(gloo: the job aborts or hangs).
Source: pytorch/pytorch#122903 (state_dict() with rank0_only hangs on rank 0) and #73383
("all ranks will still need to call all collectives, otherwise this will result in desync").
Run: torchrun --nproc-per-node 2 fsdp_full_state_dict_rank0.py
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
        if step == 1 and rank == 0:
            with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, config):
                state = model.state_dict()  # BUG: a collective, called on rank 0 only
            torch.save(state, os.path.join(tempfile.mkdtemp(), "ckpt.pt"))
    print(f"rank {rank}: done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
