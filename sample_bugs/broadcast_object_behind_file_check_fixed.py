#!/usr/bin/env python
"""Fixed twin of broadcast_object_behind_file_check.py: rank 0 decides, every rank broadcasts.

Only rank 0's view of the cache counts: it loads or builds the vocabulary, and all ranks call
broadcast_object_list unconditionally, so no rank can skip the collective.
Run: torchrun --nproc-per-node 3 broadcast_object_behind_file_check_fixed.py
"""
import datetime
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def job_dir(job_pid: int) -> Path:
    """Scratch space shared by one job's ranks; removes what killed runs left behind."""
    root = Path(tempfile.gettempdir()) / "ddpdoctor-sample-bugs"
    for old in root.glob("job-*"):
        try:
            os.kill(int(old.name[4:]), 0)
        except ProcessLookupError:  # that job is gone (a hanging bug gets killed)
            shutil.rmtree(old, ignore_errors=True)
        except (PermissionError, ValueError):
            pass
    path = root / f"job-{job_pid}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def build_vocab() -> dict:
    """Stands in for an expensive preprocessing step that only rank 0 runs."""
    return {word: i for i, word in enumerate(["<pad>", "the", "ring", "all", "reduce"])}


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    cache = job_dir(os.getppid()) / f"node{rank}"  # stands for this rank's local disk
    cache.mkdir(exist_ok=True)
    if rank == 1:  # rank 1's node kept the cache of an earlier run
        (cache / "vocab.json").write_text(json.dumps(build_vocab()))

    # FIX: the collective is unconditional; only rank 0 looks at its cache.
    vocab_file = cache / "vocab.json"
    box = [None]
    if rank == 0:
        box[0] = json.loads(vocab_file.read_text()) if vocab_file.exists() else build_vocab()
    dist.broadcast_object_list(box, src=0)
    vocab = box[0]
    vocab_file.write_text(json.dumps(vocab))

    model = DDP(nn.EmbeddingBag(len(vocab), 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tokens = torch.randint(0, len(vocab), (6, 3))
    for _ in range(3):
        opt.zero_grad()
        model(tokens).pow(2).mean().backward()
        opt.step()
    print(f"rank {rank}: vocab of {len(vocab)} words, trained", flush=True)
    shutil.rmtree(cache, ignore_errors=True)
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
