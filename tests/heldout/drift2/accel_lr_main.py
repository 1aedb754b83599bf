"""accelerate (torchrun, CPU): SGD with a manual per-epoch learning-rate decay."""
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
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = Net()
    learning_rate, decay_factor = 0.05, 0.5
    opt = torch.optim.SGD(model.parameters(), lr=learning_rate, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(128, 16, generator=gen)
    y = torch.randint(0, 4, (128,), generator=gen)
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=False)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    for epoch in range(3):
        for xb, yb in loader:
            loss = nn.functional.cross_entropy(model(xb), yb)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
        if accelerator.is_main_process:
            print(f"epoch {epoch} loss {loss.item():.4f}", flush=True)
            current_lr = learning_rate * decay_factor ** (epoch + 1)
            for group in opt.param_groups:
                group["lr"] = current_lr
    check_replicas(accelerator.unwrap_model(model))
    accelerator.end_training()


if __name__ == "__main__":
    main()
