# Rank 0 builds a vocabulary file once; the other ranks poll the shared
# filesystem until it appears (a few seconds), then everyone trains with DDP.
import json
import os
import shutil
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

WORK = os.path.join("/tmp/set4_work", os.path.splitext(os.path.basename(__file__))[0])
VOCAB_FILE = os.path.join(WORK, "vocab.json")


def build_vocab():
    time.sleep(4.0)  # scanning the corpus
    tmp = VOCAB_FILE + ".tmp"
    with open(tmp, "w") as f:
        json.dump({f"tok{i}": i for i in range(40)}, f)
    os.replace(tmp, VOCAB_FILE)  # atomic publish


def wait_for_vocab():
    while not os.path.exists(VOCAB_FILE):
        time.sleep(0.25)
    with open(VOCAB_FILE) as f:
        return json.load(f)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        shutil.rmtree(WORK, ignore_errors=True)
        os.makedirs(WORK)
    dist.barrier()
    if rank == 0:
        build_vocab()
    vocab = wait_for_vocab()

    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Embedding(len(vocab), 16), nn.Flatten(), nn.Linear(16 * 6, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(6):
        g = torch.Generator().manual_seed(rank * 10 + step)
        tokens = torch.randint(0, len(vocab), (8, 6), generator=g)
        y = (tokens[:, 0] > 20).long()
        loss = F.cross_entropy(model(tokens), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    if rank == 0:
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
