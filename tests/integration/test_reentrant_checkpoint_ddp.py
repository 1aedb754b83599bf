"""What torch's DDP does with a module checkpointed twice reentrantly in one forward, as ddpdoctor
lint's reentrant_checkpoint message says: with a parameter before the first checkpoint it raises
"Expected to mark a variable ready only once"; with none (the batch goes straight into the
checkpoint) it raises nothing and each rank keeps its own gradient for the shared weight."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.checkpoint import checkpoint

from ddpdoctor.lint.engine import lint_source
from tests.integration.spawned import end_job, run_job


class TwiceCheckpointed(nn.Module):
    """A shared layer checkpointed twice, behind an embedding or straight on the batch."""

    def __init__(self, embedded: bool):
        super().__init__()
        self.embed = nn.Linear(8, 8) if embedded else nn.Identity()
        self.shared = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.embed(x)
        h = checkpoint(self.shared, h, use_reentrant=True)
        h = checkpoint(self.shared, h, use_reentrant=True)
        return self.head(h)


def _one_backward(rank: int, embedded: bool) -> dict:
    torch.manual_seed(0)
    model = DistributedDataParallel(TwiceCheckpointed(embedded))
    torch.manual_seed(1 + rank)  # each rank its own batch
    x = torch.randn(4, 8, requires_grad=True)
    try:
        model(x).sum().backward()
    except RuntimeError as e:
        return {"raised": str(e).splitlines()[0]}
    grad = model.module.shared.weight.grad
    mean = grad.clone()
    dist.all_reduce(mean)
    return {"raised": None, "spread": (grad - mean / dist.get_world_size()).abs().max().item()}


def checkpoint_job(rank: int, world: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    found = {"batch_first": _one_backward(rank, embedded=False),
             "embedded": _one_backward(rank, embedded=True)}  # last: it leaves DDP broken
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(found))
    end_job()


def test_torchs_ddp_raises_or_leaves_the_gradients_unaveraged_as_lint_says(tmp_path) -> None:
    run_job(checkpoint_job, 2, str(tmp_path))
    for rank in range(2):
        found = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert found["batch_first"]["raised"] is None, found
        assert found["batch_first"]["spread"] > 1e-3, found  # not the ranks' mean
        assert "Expected to mark a variable ready only once" in found["embedded"]["raised"]
    source = ("import torch\nfrom torch import nn\nfrom torch.nn.parallel import "
              "DistributedDataParallel\nfrom torch.utils.checkpoint import checkpoint\n\n\n"
              + inspect.getsource(TwiceCheckpointed)
              + "\n\nDistributedDataParallel(TwiceCheckpointed(False))\n")
    [finding] = [f for f in lint_source(source, "job.py") if f.kind == "reentrant_checkpoint"]
    assert finding.severity.value == "error"
    assert "Expected to mark a variable ready only once" in finding.message
    assert "replicas silently drift apart" in finding.message
