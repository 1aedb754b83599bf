# Token-budgeted sequence model trained with DDP.  The training loop follows the
# common "catch OOM, skip the batch" recipe.  A memory guard stands in for the
# CUDA caching allocator: it raises the same error text when a batch is too big.
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

MAX_TOKENS = 4096
VOCAB = 50
STEPS = 8


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 32)
        self.rnn = nn.GRU(32, 32, batch_first=True)
        self.out = nn.Linear(32, VOCAB)

    def forward(self, tokens):
        if tokens.numel() > MAX_TOKENS:
            raise RuntimeError(
                f"CUDA out of memory. Tried to allocate {tokens.numel() * 4 // 1024} MiB (device budget {MAX_TOKENS} tokens)")
        h, _ = self.rnn(self.emb(tokens))
        return self.out(h)


def length_bucket_batch(rank, step):
    g = torch.Generator().manual_seed(rank * 31 + step)
    seq_len = 24 if not (rank == 1 and step == 4) else 640  # a long document lands on rank 1
    tokens = torch.randint(0, VOCAB, (8, seq_len + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(TinyLM())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    for step in range(STEPS):
        inp, tgt = length_bucket_batch(rank, step)
        try:
            logits = model(inp)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt.reshape(-1))
            loss.backward()
        except RuntimeError as e:
            if "out of memory" in str(e):
                print(f"[rank {rank}] | WARNING: ran out of memory, skipping batch {step}", flush=True)
                opt.zero_grad()
                continue
            raise
        opt.step()
        opt.zero_grad()
        if rank == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)

    dist.barrier()
    if rank == 0:
        print("epoch done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
