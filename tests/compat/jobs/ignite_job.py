"""pytorch-ignite trainer with a DDP model under torchrun on 2 CPU ranks.

Usage: torchrun --nproc-per-node 2 ignite_job.py OUT; saves OUT/rank{R}.pt.
"""

import os
import sys

import ignite.distributed as idist
import torch
from ignite.engine import create_supervised_trainer
from torch import nn
from torch.utils.data import TensorDataset


def training(local_rank: int, out: str) -> None:
    torch.manual_seed(0)
    model = idist.auto_model(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    opt = idist.auto_optim(torch.optim.SGD(model.parameters(), lr=0.1))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=g)
    loader = idist.auto_dataloader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8,
                                   shuffle=False)
    trainer = create_supervised_trainer(model, opt, nn.MSELoss())
    trainer.run(loader, max_epochs=2)
    params = {k: v.detach().clone() for k, v in model.module.state_dict().items()}
    torch.save({"params": {"trainer": params}, "checks": {}},
               os.path.join(out, f"rank{idist.get_rank()}.pt"))


def main() -> None:
    with idist.Parallel(backend="gloo") as parallel:
        parallel.run(training, sys.argv[1])


if __name__ == "__main__":
    main()
