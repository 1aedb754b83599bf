"""ddpdoctor lint's rules on small sources: each case marks the lines that must be flagged with
``# expect: KIND`` (every other line must stay clean), true and false positives side by side."""

from __future__ import annotations

import re
import textwrap

import pytest

from ddpdoctor.lint.engine import lint_source
from ddpdoctor.lint.findings import Severity

MARK = re.compile(r"#\s*expect:\s*([a-z_]+)")
HEADER = """\
import os, random, time
import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset
from torch.utils.checkpoint import checkpoint
"""


def expected_and_found(body: str) -> tuple[set, set, list]:
    source = HEADER + textwrap.dedent(body)
    expected = {(i, m.group(1)) for i, line in enumerate(source.splitlines(), 1)
                for m in [MARK.search(line)] if m}
    findings = lint_source(source, "case.py")
    return expected, {(f.line, f.kind) for f in findings}, findings


def check(body: str) -> list:
    expected, found, findings = expected_and_found(body)
    assert found == expected, "\n".join(f"{f.line}: {f.kind}: {f.message}" for f in findings)
    return findings


def severities(findings) -> set[str]:
    return {f.severity.value for f in findings}


# -- rank_dependent_collective / conditional_collective -------------------------------------
def test_collective_under_rank_condition():
    findings = check("""
    def main():
        rank = int(os.environ["RANK"])
        t = torch.ones(1)
        if rank == 0:
            dist.barrier()  # expect: rank_dependent_collective
            print("saved")
        if dist.get_rank() == 0:
            print("only a print")
        if rank == 0:
            dist.all_reduce(t)
        else:
            dist.all_reduce(t)
        if rank == 0:
            dist.send(t, dst=1)
        else:
            dist.recv(t, src=0)
    """)
    assert severities(findings) == {"error"}
    assert findings[0].condition is not None and findings[0].condition.source == "if rank == 0:"


def test_the_same_collective_on_each_sides_own_group_is_balanced():
    """Pairs of ranks, each pair on its own group: every rank issues one all_reduce, on the
    group of the side it takes.  A side whose call is on no explicit group still differs."""
    check("""
    def main(rank):
        rank = dist.get_rank()
        t = torch.ones(1)
        g01, g23 = dist.new_group([0, 1]), dist.new_group([2, 3])
        if rank < 2:
            dist.all_reduce(t, group=g01)
        else:
            dist.all_reduce(t, group=g23)
        if rank < 2:
            dist.all_reduce(t, group=g01)  # expect: rank_dependent_collective
        else:
            dist.all_reduce(t)
    """)


def test_rank_zero_first_pattern_is_balanced():
    check("""
    def rank_zero_first(rank):
        rank = dist.get_rank()
        if rank != 0:
            dist.barrier()
        yield
        if rank == 0:
            dist.barrier()

    def wrong(rank):
        rank = dist.get_rank()
        if rank != 0:
            dist.barrier()  # expect: rank_dependent_collective
        yield
    """)


def test_rank_through_helpers_and_summaries():
    check("""
    def is_main():
        return dist.get_rank() == 0

    def sync(t):
        dist.all_reduce(t)

    def log(t):
        print(t)

    def main(t):
        if is_main():
            sync(t)  # expect: rank_dependent_collective
        if is_main():
            log(t)
    """)


def test_data_file_time_random_and_exception_conditions_are_warnings():
    findings = check("""
    def main(loss, path, t):
        if loss.item() > 10:
            dist.all_reduce(t)  # expect: conditional_collective
        if os.path.exists(path):
            dist.barrier()  # expect: conditional_collective
        if time.time() > 5:
            dist.barrier()  # expect: conditional_collective
        if random.random() < 0.5:
            dist.barrier()  # expect: conditional_collective
        failed = False
        try:
            open(path)
        except OSError:
            failed = True
        if failed:
            dist.barrier()  # expect: conditional_collective
        dist.all_reduce(t)
        if t.item() > 10:
            dist.barrier()
    """)
    assert severities(findings) == {"warning"}


def test_uniform_after_all_reduce():
    check("""
    def main(loss):
        local = loss.detach()
        if local.item() > 1:
            dist.barrier()  # expect: conditional_collective
        dist.all_reduce(local)
        if local.item() > 1:
            dist.barrier()
    """)


def test_rank_dependent_order():
    check("""
    def main(rank, a, b, ga, gb):
        rank = dist.get_rank()
        if rank == 0:
            dist.all_reduce(a, group=ga)  # expect: rank_dependent_order
            dist.all_reduce(b, group=gb)
        else:
            dist.all_reduce(b, group=gb)
            dist.all_reduce(a, group=ga)
    """)


def test_rank_zero_only_decorator():
    check("""
    from lightning.pytorch.utilities import rank_zero_only

    @rank_zero_only
    def save(t):
        dist.barrier()  # expect: rank_dependent_collective

    @rank_zero_only
    def log(t):
        print(t)
    """)


# -- skips ----------------------------------------------------------------------------------
def test_skips_under_divergent_conditions():
    check("""
    def train(model, loader, opt, rank):
        rank = dist.get_rank()
        model = DDP(model)
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            if torch.isnan(loss):
                continue  # expect: conditional_skip
            loss.backward()
            opt.step()
        for x, y in loader:
            if rank == 1 and x.sum() > 0:
                break  # expect: rank_dependent_skip
            model(x).sum().backward()

    def evaluate(rank, t):
        rank = dist.get_rank()
        if rank != 0:
            return  # expect: rank_dependent_skip
        dist.all_reduce(t)

    def harmless(rank, t):
        rank = dist.get_rank()
        dist.all_reduce(t)
        if rank != 0:
            return
        print(t)
    """)


def test_skip_after_agreeing_is_fine():
    check("""
    def train(model, loader, world):
        world = dist.get_world_size()
        model = DDP(model)
        best = 1e9
        for epoch in range(10):
            for x, y in loader:
                nn.functional.mse_loss(model(x), y).backward()
            val = torch.tensor([1.0])
            dist.all_reduce(val)
            val_loss = val.item() / world
            if val_loss >= best:
                break
            best = val_loss
    """)


def test_skip_balanced_in_its_branch():
    check("""
    def train(loader, t):
        for x in loader:
            if torch.isnan(x).any():
                dist.all_reduce(torch.zeros(1))
                continue
            dist.all_reduce(t)
    """)


# -- loops ----------------------------------------------------------------------------------
def test_loops_with_rank_dependent_bounds():
    check("""
    from torch.distributed.algorithms.join import Join

    def main(rank, world, data, model, t):
        rank = dist.get_rank()
        world = dist.get_world_size()
        model = DDP(model)
        for _ in range(rank + 1):
            dist.all_reduce(t)  # expect: rank_dependent_loop
        mine = data[rank::world]
        for x in mine:
            model(x).sum().backward()  # expect: uneven_loop
        with Join([model]):
            for x in mine:
                model(x).sum().backward()
        loader = DataLoader(data, sampler=DistributedSampler(data, rank=rank), batch_size=2)
        for x in loader:
            model(x).sum().backward()
        steps = torch.tensor([len(mine)])
        dist.all_reduce(steps, op=dist.ReduceOp.MIN)
        for i in range(int(steps)):
            model(mine[i]).sum().backward()
        n = 0
        while n < rank:
            dist.barrier()  # expect: rank_dependent_loop
            n += 1
    """)


def test_ddp_forward_without_grad_is_no_collective():
    check("""
    def main(rank, model, x):
        rank = dist.get_rank()
        model = DDP(model)
        if rank == 0:
            with torch.no_grad():
                model(x)
            model.module(x)
        if rank == 0:
            model(x)  # expect: rank_dependent_collective
    """)


# -- p2p ------------------------------------------------------------------------------------
def test_recv_before_send():
    check("""
    def main(rank, mine, theirs):
        rank = dist.get_rank()
        peer = 1 - rank
        dist.recv(theirs, src=peer)  # expect: recv_before_send
        dist.send(mine, dst=peer)

    def ordered(rank, mine, theirs):
        rank = dist.get_rank()
        peer = 1 - rank
        if rank == 0:
            dist.send(mine, dst=peer)
            dist.recv(theirs, src=peer)
        else:
            dist.recv(theirs, src=peer)
            dist.send(mine, dst=peer)
    """)


# -- silent bugs ----------------------------------------------------------------------------
def test_missing_set_epoch():
    check("""
    def train(data, model):
        sampler = DistributedSampler(data, shuffle=True)
        loader = DataLoader(data, batch_size=4, sampler=sampler)
        for epoch in range(3):  # expect: missing_set_epoch
            for x in loader:
                model(x)

    def fixed(data, model):
        sampler = DistributedSampler(data, shuffle=True)
        loader = DataLoader(data, batch_size=4, sampler=sampler)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            for x in loader:
                model(x)

    def not_shuffled(data, model):
        loader = DataLoader(data, sampler=DistributedSampler(data, shuffle=False))
        for epoch in range(3):
            for x in loader:
                model(x)
    """)


def test_seed_collision_in_the_main_process():
    check("""
    SEED = 0

    class Crops(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return torch.randn(4)

    def main():
        torch.manual_seed(SEED)  # expect: seed_collision
        loader = DataLoader(Crops(), batch_size=2)

    def fixed(rank):
        rank = dist.get_rank()
        torch.manual_seed(SEED + rank)
        loader = DataLoader(Crops(), batch_size=2)
    """)


def test_seed_collision_in_workers():
    check("""
    class Jitter(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return np.random.uniform(0, 1, 4)

    def main(rank):
        rank = dist.get_rank()
        torch.manual_seed(42)
        data = Jitter()
        a = DataLoader(data, num_workers=2)  # expect: seed_collision
        b = DataLoader(data, num_workers=2, generator=torch.Generator().manual_seed(42 + rank))
        c = DataLoader(data, num_workers=2, worker_init_fn=lambda w: np.random.seed(w))
        d = DataLoader(data, num_workers=2, generator=torch.Generator().manual_seed(0))  # expect: seed_collision
    """)


def test_duplicate_data_split_without_rank():
    check("""
    def main(data):
        world = dist.get_world_size()
        rank = dist.get_rank()
        same = data[::world]  # expect: duplicate_data
        mine = data[rank::world]
        also_same = Subset(data, range(0, len(data), world))  # expect: duplicate_data
    """)


# -- ignore comments and the JSON form ------------------------------------------------------
def test_ignore_comment_silences_one_kind():
    check("""
    def main(rank):
        rank = dist.get_rank()
        if rank == 0:
            dist.barrier()  # ddpdoctor: ignore[rank_dependent_collective]
        if rank == 0:
            dist.barrier()  # ddpdoctor: ignore[uneven_loop]  # expect: rank_dependent_collective
    """)


def test_finding_json_has_the_contract_fields():
    findings = check("""
    def main(rank):
        rank = dist.get_rank()
        if rank == 0:
            dist.barrier()  # expect: rank_dependent_collective
    """)
    d = findings[0].as_dict()
    assert set(d) == {"kind", "severity", "file", "line", "collective", "condition", "message",
                      "fix"}
    assert d["severity"] == "error" and d["collective"] == "barrier" and d["file"] == "case.py"
    assert d["condition"] == {"file": "case.py", "line": d["line"] - 1, "source": "if rank == 0:"}
    assert findings[0].severity == Severity.ERROR


@pytest.mark.parametrize("source", ["def f(:\n", "x = (\n"])
def test_lint_source_rejects_bad_syntax(source):
    with pytest.raises(SyntaxError):
        lint_source(source)


def test_model_changed_on_some_ranks():
    check("""
    def main(model, rank, freeze):
        rank = dist.get_rank()
        if rank == 1:
            model.encoder.weight.requires_grad_(False)  # expect: rank_dependent_model
        if freeze:
            model.encoder.weight.requires_grad_(False)
        if rank == 0:
            model.head.requires_grad = False  # expect: rank_dependent_model
        ddp = DDP(model)
    """)


def test_ddp_forward_without_grad_broadcasts_buffers():
    check("""
    def main(rank, x):
        rank = dist.get_rank()
        model = DDP(nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)))
        if rank == 0:
            with torch.no_grad():
                model(x)  # expect: rank_dependent_collective
        quiet = DDP(nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)), broadcast_buffers=False)
        if rank == 0:
            with torch.no_grad():
                quiet(x)
    """)


def test_subgroup_members_and_world_slices():
    check("""
    def main(rank, t, world, res):
        rank = dist.get_rank()
        world = dist.get_world_size()
        members = [0, 2]
        group = dist.new_group(members)
        if rank in members:
            dist.all_reduce(t, group=group)
            model = DDP(nn.Linear(4, 3), process_group=group)
            model(t).sum().backward()
        if rank in members:
            dist.all_reduce(t)  # expect: rank_dependent_collective
        last_two = res[world - 2:]
        every_world_th = res[1::world]  # expect: duplicate_data
    """)


def test_unused_parameters_under_ddp():
    check("""
    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(8, 16)
            self.act = nn.ReLU()
            self.head = nn.Linear(16, 2)
            self.aux = nn.Linear(16, 2)
            self.spare = nn.Linear(16, 2)

        def forward(self, x, rare):
            h = self.act(self.body(x))
            if rare.any():
                return self.head(h), self.aux(h)
            return self.head(h), None

    class AllUsed(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(8, 16)
            self.aux = nn.Linear(16, 2)

        def forward(self, x, rare):
            h = self.body(x)
            if rare.any():
                return h, self.aux(h)
            return h, 0.0 * self.aux(h).sum()

    def main():
        a = DDP(TwoHeads())  # expect: unused_parameters
        b = DDP(TwoHeads(), find_unused_parameters=True)
        net = AllUsed()
        c = DDP(net)
    """)


def test_lock_held_across_a_collective():
    check("""
    import fcntl
    import threading

    def main(rank, path, t):
        rank = dist.get_rank()
        with open(path) as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            dist.barrier()  # expect: lock_held_across_collective
            fcntl.flock(f, fcntl.LOCK_UN)
        with open(path) as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            fcntl.flock(f, fcntl.LOCK_UN)
            dist.barrier()
        lock = threading.Lock()
        lock.acquire()
        dist.all_reduce(t)  # expect: lock_held_across_collective
        lock.release()
    """)


def test_others_first_then_rank_zero_idioms():
    check("""
    def hf_style(args, load):
        if args.local_rank not in [-1, 0]:
            dist.barrier()
        model = load()
        if args.local_rank == 0:
            dist.barrier()

    def torch_distributed_zero_first(local_rank):
        local_rank = int(os.environ["LOCAL_RANK"])
        if local_rank not in [-1, 0]:
            dist.barrier(device_ids=[local_rank])
        yield
        if local_rank == 0:
            dist.barrier(device_ids=[0])
    """)


def test_no_grad_decorator():
    check("""
    @torch.no_grad()
    def evaluate(model, loader):
        for x in loader:
            model(x)

    def main(net, loader, rank):
        rank = dist.get_rank()
        model = DDP(net)
        if rank == 0:
            evaluate(model, loader)
    """)


def test_loops_over_containers_follow_their_length_not_their_contents():
    check("""
    def main(ds, t):
        loader = DataLoader(ds, batch_size=4)
        counts = []
        for x in loader:
            counts.append(x.sum())
        for c in counts:
            dist.all_reduce(c)
        totals = {"pos": torch.zeros(1), "neg": torch.zeros(1)}
        for x in loader:
            totals["pos"] += x.sum()
        for k in sorted(totals):
            dist.all_reduce(totals[k])
        seen = {}
        for x in loader:
            if x.sum() > 0:
                seen["pos"] = x
        for k in seen:
            dist.all_reduce(seen[k])  # expect: uneven_loop
        picked = []
        for x in loader:
            if x.sum() > 0:
                picked.append(x)
        for p in picked:
            dist.all_reduce(p)  # expect: uneven_loop
    """)


# -- reentrant_checkpoint ---------------------------------------------------------------------
def test_one_module_under_two_reentrant_checkpoints_in_ddp():
    findings = check("""
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(16, 16)
            self.other = nn.Linear(16, 16)

        def forward(self, h, flag):
            h = checkpoint(self.shared, h, use_reentrant=True)
            h = checkpoint(self.other, h, use_reentrant=True)
            h = checkpoint(self.shared, h, use_reentrant=True)  # expect: reentrant_checkpoint
            return h

    class DefaultIsReentrant(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(16, 16)

        def forward(self, h):
            h = checkpoint(self.shared, h)
            return checkpoint(self.shared, h)  # expect: reentrant_checkpoint

    class NonReentrant(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(16, 16)

        def forward(self, h, how):
            h = checkpoint(self.shared, h, use_reentrant=False)
            h = checkpoint(self.shared, h, use_reentrant=False)
            h = checkpoint(self.shared, h, use_reentrant=how)
            return checkpoint(self.shared, h, **{"use_reentrant": True})

    class OneBranchEach(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(16, 16)

        def forward(self, h, flag):
            if flag:
                h = checkpoint(self.shared, h, use_reentrant=True)
            else:
                h = checkpoint(self.shared, h * 2, use_reentrant=True)
            return h

    class EarlyReturn(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(16, 16)

        def forward(self, h, flag):
            if flag:
                return checkpoint(self.shared, h, use_reentrant=True)
            h = checkpoint(self.shared, h * 2, use_reentrant=True)
            if flag > 1:
                raise ValueError("flag")
            return checkpoint(self.shared, h, use_reentrant=True)  # expect: reentrant_checkpoint

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.parts = nn.ModuleList([Twice(), DefaultIsReentrant(), NonReentrant(),
                                        OneBranchEach(), EarlyReturn()])

    def main():
        model = DDP(Model().to("cpu"))
    """)
    assert severities(findings) == {"error"}
    assert all("use_reentrant=False" in f.fix for f in findings)


def test_reentrant_checkpoint_in_a_loop():
    check("""
    class SharedLoop(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(16, 16)
            self.blocks = nn.ModuleList([nn.Linear(16, 16) for _ in range(4)])
            self.head = nn.Linear(16, 2)

        def forward(self, h):
            for _ in range(2):
                h = checkpoint(self.shared, h, use_reentrant=True)  # expect: reentrant_checkpoint
            for block in self.blocks:
                h = checkpoint(block, h, use_reentrant=True)
            for i in range(len(self.blocks)):
                h = checkpoint(self.blocks[i], h, use_reentrant=True)
            for _ in range(1):
                h = checkpoint(self.head, h, use_reentrant=True)
            return h

        def chunks(self, parts):
            outs = [checkpoint(self.shared, p) for p in parts]  # expect: reentrant_checkpoint
            return [checkpoint(b, p, use_reentrant=True) for b, p in zip(self.blocks, outs)]

    net = SharedLoop()
    model = DDP(net)
    """)


def test_reentrant_checkpoint_outside_ddp_or_with_static_graph():
    check("""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    class Sharded(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(16, 16)

        def forward(self, h):
            h = checkpoint(self.shared, h, use_reentrant=True)
            return checkpoint(self.shared, h, use_reentrant=True)

    class NotWrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(16, 16)

        def forward(self, h):
            h = checkpoint(self.shared, h, use_reentrant=True)
            return checkpoint(self.shared, h, use_reentrant=True)

    class Static(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(16, 16)

        def forward(self, h):
            h = checkpoint(self.shared, h, use_reentrant=True)
            return checkpoint(self.shared, h, use_reentrant=True)

    class Other(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, h):
            return self.fc(h)

    def main():
        a = DDP(Static(), static_graph=True)
        b = DDP(Other())
        c = FSDP(Sharded())
    """)


def test_reentrant_checkpoint_when_the_wrapped_module_is_not_known():
    findings = check("""
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(16, 16)

        def forward(self, h):
            h = checkpoint(self.shared, h)
            return checkpoint(self.shared, h)  # expect: reentrant_checkpoint

    def main(build):
        model = DDP(build())
    """)
    assert severities(findings) == {"warning"}


def test_a_loop_that_always_runs_uses_its_submodule():
    check("""
    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(16, 16)
            self.head = nn.Linear(16, 2)

        def forward(self, h):
            for _ in range(2):
                h = checkpoint(self.shared, h, use_reentrant=False)
            return self.head(h)

    class Deep(nn.Module):
        def __init__(self):
            super().__init__()
            self.depth = 3
            self.shared = nn.Linear(16, 16)

        def forward(self, h):
            for _ in range(self.depth):
                h = self.shared(h)
            return h

    class DataLoop(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(16, 16)

        def forward(self, h, steps):
            for _ in range(steps):
                h = self.shared(h)
            return h

    class EarlyExit(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(16, 16)
            self.norm = nn.LayerNorm(16)

        def forward(self, h):
            for _ in range(2):
                if h.sum() > 0:
                    break
                h = self.norm(h)
            return self.shared(h)

    def main():
        a = DDP(Shared())
        b = DDP(Deep())
        c = DDP(DataLoop())  # expect: unused_parameters
        d = DDP(EarlyExit())  # expect: unused_parameters
    """)


# -- dtype_divergence -------------------------------------------------------------------------
def test_dtype_inferred_from_counters_a_rank_dependent_loop_makes_float():
    findings = check("""
    def evaluate(model, val, loader, rank, world):
        rank = dist.get_rank()
        world = dist.get_world_size()
        shard = Subset(val, range(rank * 2, min(len(val), rank * 2 + 2)))
        correct, seen = 0, 0
        for x, y in DataLoader(shard, batch_size=2):
            correct += (model(x).argmax(1) == y).float().sum().item()
            seen += len(y)
        stats = torch.tensor([correct, seen])  # expect: dtype_divergence
        dist.all_reduce(stats)
        typed = torch.tensor([correct, seen], dtype=torch.float64)
        dist.all_reduce(typed)
        counts = torch.tensor([seen])
        dist.all_reduce(counts)
        local = torch.tensor([correct, seen])
        print(local)
        total = 0
        for x, y in loader:
            total += (model(x).argmax(1) == y).float().sum().item()
        even = torch.tensor([total])
        dist.all_reduce(even)
        started_float = 0.0
        for x, y in DataLoader(shard, batch_size=2):
            started_float += (model(x) - y).float().mean().item()
        mean = torch.tensor([started_float])
        dist.all_reduce(mean)

    def per_rank_steps(rank):
        rank = dist.get_rank()
        score = 0
        for i in range(rank):
            score += i / 2
        t = torch.tensor(score)  # expect: dtype_divergence
        dist.broadcast(t, src=0)
    """)
    assert [f.severity.value for f in findings] == ["warning", "error"]
    assert findings[0].condition is not None and "for x, y in DataLoader(shard" in \
        findings[0].condition.source
