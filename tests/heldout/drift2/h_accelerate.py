"""HF accelerate Accelerator launched by torchrun (CPU), prepared model/optimizer/dataloader/scheduler,
gradient_accumulation_steps=2 with accelerator.accumulate and accelerator.clip_grad_norm_."""
import hashlib

import torch
import torch.distributed as dist
import torch.nn as nn
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

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


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.encoder(x))


def main():
    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.1, total_iters=20)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(128, 16, generator=gen)
    y = torch.randint(0, 4, (128,), generator=gen)
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)
    for epoch in range(2):
        for xb, yb in loader:
            with accelerator.accumulate(model):
                loss = nn.functional.cross_entropy(model(xb), yb)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                opt.zero_grad()
    accelerator.print(f"final loss {loss.item():.4f} lr {opt.param_groups[0]['lr']:.6f}")
    check_replicas(accelerator.unwrap_model(model))
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
