"""DeepSpeed ZeRO stages 0, 1 and 2 on 2 CPU ranks (DS_ACCELERATOR=cpu, gloo) under torchrun,
one engine after another; each rank saves every stage's final parameters to OUT/rank{R}.pt.
Usage: DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 deepspeed_job.py OUT
"""

import os
import sys

import deepspeed
import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    out = sys.argv[1]
    torch.set_num_threads(1)
    results = {}
    for stage in (0, 1, 2):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        config = {"train_micro_batch_size_per_gpu": 4,
                  "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}},
                  "zero_optimization": {"stage": stage}}
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                               config=config)
        rank = dist.get_rank()
        for step in range(4):
            x = torch.randn(4, 8, generator=torch.Generator().manual_seed(100 * rank + step))
            engine.backward(engine(x).square().mean())
            engine.step()
        results[f"zero{stage}"] = {k: v.detach().float().clone()
                                   for k, v in engine.module.state_dict().items()}
    torch.save({"params": results}, os.path.join(out, f"rank{dist.get_rank()}.pt"))
    dist.barrier()


if __name__ == "__main__":
    main()
