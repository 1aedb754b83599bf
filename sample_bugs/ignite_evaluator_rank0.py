#!/usr/bin/env python
"""pytorch-ignite: the evaluator runs on rank 0 only, and its metric hangs the job.

After each epoch rank 0 runs the validation evaluator "to save time on the others".
ignite's metrics all-reduce their state across ranks in compute(), so rank 0 waits in an
all-reduce that rank 1, already in the next epoch's backward pass, never calls.
Source: pytorch-ignite docs (metrics are computed on all ranks in a distributed
configuration); the same shape as huggingface/transformers#31532.
Run: torchrun --nproc-per-node 2 ignite_evaluator_rank0.py
"""
import datetime
import os

import ignite.distributed as idist
import torch
import torch.distributed as dist
from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
from ignite.metrics import Accuracy
from torch import nn
from torch.utils.data import TensorDataset


def training(local_rank: int) -> None:
    torch.manual_seed(0)
    model = idist.auto_model(nn.Linear(8, 2))
    opt = idist.auto_optim(torch.optim.SGD(model.parameters(), lr=0.1))
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(32, 8, generator=g), torch.randint(0, 2, (32,), generator=g))
    train = idist.auto_dataloader(data, batch_size=4, shuffle=True)
    val = idist.auto_dataloader(data, batch_size=8, shuffle=False)
    trainer = create_supervised_trainer(model, opt, nn.CrossEntropyLoss())
    evaluator = create_supervised_evaluator(model, metrics={"acc": Accuracy()})

    @trainer.on(Events.EPOCH_STARTED)
    def reshuffle(engine) -> None:  # ignite leaves set_epoch to the user
        train.sampler.set_epoch(engine.state.epoch - 1)

    @trainer.on(Events.EPOCH_COMPLETED)
    def validate(engine) -> None:
        if idist.get_rank() == 0:
            # BUG: the evaluator (whose metric all-reduces) runs on rank 0 only.
            evaluator.run(val)
            print(f"epoch {engine.state.epoch}: {evaluator.state.metrics}", flush=True)

    trainer.run(train, max_epochs=3)


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    print(f"rank {rank} starts", flush=True)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    training(int(os.environ["LOCAL_RANK"]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
