#!/usr/bin/env python
"""Fixed twin: every rank calls `accelerator.gather`; only the print stays on the main process.

After each epoch the main process gathers the predictions of every rank to compute an
accuracy, but only the main process calls gather: rank 1 starts the next epoch and waits
in its first gradient all-reduce, rank 0 waits in the gather.
Source: huggingface/accelerate#2785 (gather_for_metrics under is_main_process hangs),
huggingface/accelerate#2733, huggingface/transformers#31532.
Run: torchrun --nproc-per-node 2 accelerate_gather_main_process_fixed.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    print(f"rank {rank} starts", flush=True)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(32, 8, generator=g), torch.randint(0, 2, (32,), generator=g))
    loader = DataLoader(data, batch_size=4)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    for epoch in range(3):
        correct = []
        for x, y in loader:
            out = model(x)
            accelerator.backward(nn.functional.cross_entropy(out, y))
            opt.step()
            opt.zero_grad()
            correct.append((out.argmax(1) == y).float())
        all_correct = accelerator.gather(torch.cat(correct))  # FIX: on every rank
        if accelerator.is_main_process:
            print(f"epoch {epoch}: accuracy {all_correct.mean():.3f}", flush=True)
    accelerator.wait_for_everyone()  # every rank is done before the group goes away
    accelerator.end_training()  # destroys the process group


if __name__ == "__main__":
    main()
