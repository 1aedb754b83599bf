"""Epoch-style SFT loop: each rank packs variable-length documents from its own shard into fixed-size
rows, and the learning-rate multiplier follows dataset progress (warmdown over the last part)."""
import hashlib

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

def check_replicas(module):
    named = list(module.named_parameters()) + list(module.named_buffers())
    digests = []
    for _, t in named:
        raw = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        digests.append(int.from_bytes(hashlib.sha256(raw).digest()[:7], "little"))
    mine = torch.tensor(digests, dtype=torch.int64)
    everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    first = None
    for i, (name, _) in enumerate(named):
        if any(int(h[i]) != int(everyone[0][i]) for h in everyone):
            first = name
            break
    if dist.get_rank() == 0:
        print("REPLICAS identical" if first is None else f"REPLICAS differ: {first}", flush=True)
    dist.barrier()
    return first


class Bigram(nn.Module):
    def __init__(self, vocab=64, dim=24):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.GELU())
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.lm_head(self.mlp(self.embed(tokens)))


def get_lr_multiplier(progress, warmdown=0.8):
    if progress < 1 - warmdown:
        return 1.0
    return max((1 - progress) / warmdown, 0.0)


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Bigram()
    ddp = DDP(model)
    base_lr = 3e-3
    opt = torch.optim.AdamW(model.parameters(), lr=base_lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(500 + rank)
    shard = [torch.randint(0, 64, (int(torch.randint(4, 40, (1,), generator=gen)),), generator=gen) for _ in range(300)]
    rows, row_len = 4, 48
    cursor = 0
    for step in range(20):
        batch = torch.zeros(rows, row_len, dtype=torch.long)
        for r in range(rows):
            filled = 0
            while cursor < len(shard) and filled + len(shard[cursor]) <= row_len:
                doc = shard[cursor]
                batch[r, filled:filled + len(doc)] = doc
                filled += len(doc)
                cursor += 1
        progress_t = torch.tensor([cursor / len(shard)], dtype=torch.float64)
        dist.all_reduce(progress_t, op=dist.ReduceOp.MAX)
        progress = progress_t.item()
        lrm = get_lr_multiplier(progress)
        for group in opt.param_groups:
            group["lr"] = base_lr * lrm
        logits = ddp(batch[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 64), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    print(f"rank {rank} progress {progress:.3f} lrm {lrm:.4f}", flush=True)
    check_replicas(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
