"""lint #52: an error needs a definite path from the rank to the condition; what lint cannot see
makes a warning at most; values made uniform stay uniform; per-rank iterator ends; an uncaught
raise ends the job; the single-process side of a process-group test; tuple returns item by
item; frameworks' hidden collectives; a project's helpers read across files."""

from __future__ import annotations

import textwrap
from pathlib import Path

from ddpdoctor.lint.engine import lint_files
from tests.unit.test_lint_rules import check, severities


def test_an_unknown_helper_given_the_rank_makes_a_warning_saying_what_it_could_not_see():
    findings = check("""
    from helpers import evaluate
    def main(model, loader):
        rank = dist.get_rank()
        stats = evaluate(model, loader, rank=rank)
        if stats.done:
            dist.barrier()  # expect: rank_dependent_collective
    """)
    assert severities(findings) == {"warning"}
    assert "`evaluate()`, which lint cannot read" in findings[0].message


def test_a_definite_path_stays_an_error():
    findings = check("""
    def main():
        rank = dist.get_rank()
        is_main = rank == 0
        flag = int(is_main) + 1
        if flag > 1:
            dist.barrier()  # expect: rank_dependent_collective
    """)
    assert severities(findings) == {"error"}


def test_counters_all_reduced_after_an_unknown_helper_are_uniform():
    check("""
    from helpers import evaluate
    def main(model, loader):
        correct, total = evaluate(model, loader, rank=dist.get_rank())
        stats = torch.tensor([correct, total])
        dist.all_reduce(stats)
        acc = stats[0] / stats[1]
        if acc > 0.5:
            dist.barrier()
    """)


def test_a_helper_that_only_logs_the_rank_returns_no_rank():
    check("""
    def pad(dataset, size, rank):
        rank = dist.get_rank()
        print(f"rank {rank} pads")
        return dataset[:size]
    def main(ds):
        rank = dist.get_rank()
        ds = pad(ds, 8, rank)
        if len(ds) < 8:
            dist.barrier()
    """)


def test_an_object_built_with_the_rank_is_read_attribute_by_attribute():
    check("""
    class State:
        def __init__(self, step, loader_state):
            self.step = step
            self.loader_state = loader_state
    def main():
        state = State(0, {"rank": dist.get_rank()})
        for _ in range(10):
            state.step += 1
            if state.step % 5 == 0:
                dist.barrier()
    """)


def test_a_path_only_value_passed_to_an_unknown_call_carries_nothing():
    check("""
    from helpers import load_checkpoint
    def main(model, opt):
        rank = dist.get_rank()
        model = DDP(model)
        avg = None
        if rank == 0:
            avg = model
        ckpt = load_checkpoint("ckpt.pt", model, avg=avg)
        if ckpt and "optimizer" in ckpt:
            opt.load_state_dict(ckpt["optimizer"])
    """)


def test_an_uncaught_raise_ends_the_job_but_a_caught_one_skips():
    check("""
    def main(x):
        rank = dist.get_rank()
        if rank == 0 and x is None:
            raise ValueError("config")
        dist.barrier()
        for step in range(3):
            try:
                if rank == 1:
                    raise RuntimeError("skip")  # expect: rank_dependent_skip
                dist.all_reduce(x)
            except RuntimeError:
                pass
    """)


def test_stop_iteration_of_this_ranks_iterator_is_a_per_rank_decision():
    findings = check("""
    def train(model, loader):
        model = DDP(model)
        it = iter(loader)
        while True:
            try:
                batch = next(it)
            except StopIteration:
                break  # expect: conditional_skip
            model(batch).sum().backward()
    """)
    assert severities(findings) == {"warning"}


def test_stop_iteration_that_restarts_the_iterator_is_no_jump():
    check("""
    def train(model, loader, steps):
        model = DDP(model)
        it = iter(loader)
        for _ in range(steps):
            try:
                batch = next(it)
            except StopIteration:
                it = iter(loader)
                batch = next(it)
            model(batch).sum().backward()
    """)


def test_the_single_process_side_of_a_process_group_test():
    check("""
    import contextlib
    def sync(value):
        if dist.is_available() and dist.is_initialized():
            t = torch.tensor(value)
            dist.broadcast(t, 0)
            return t.item()
        else:
            return value
    @contextlib.contextmanager
    def main_first():
        if not dist.is_available() or not dist.is_initialized():
            yield
            return
        if dist.get_rank() != 0:
            dist.barrier()
        yield
        if dist.get_rank() == 0:
            dist.barrier()
    def main():
        stop = False
        if dist.get_rank() == 0:
            stop = True
        stop = sync(stop)
        if stop:
            dist.barrier()
    """)


def test_tuple_returns_are_read_item_by_item():
    check("""
    def setup():
        use_ddp = "RANK" in os.environ
        rank = int(os.environ.get("RANK", 0))
        return use_ddp, rank
    def main():
        use_ddp, rank = setup()
        if use_ddp:
            dist.barrier()
        if rank == 0:
            dist.barrier()  # expect: rank_dependent_collective
    """)


def test_a_rank_told_to_init_process_group_is_the_rank():
    check("""
    def run(proc_id, n_gpus, seeds):
        dist.init_process_group("nccl", world_size=n_gpus, rank=proc_id)
        if proc_id == 0:
            dist.barrier()  # expect: rank_dependent_collective
        mine = torch.split(seeds, 10)[proc_id]
        for s in mine:
            dist.all_reduce(s)  # expect: uneven_loop
    """)


def test_a_helper_whose_collectives_are_switched_off_issues_none():
    check("""
    def save(path, state, synchronize=True):
        if synchronize:
            dist.barrier()
        torch.save(state, path)
    def main(state):
        if dist.get_rank() == 0:
            save("a.pt", state, synchronize=False)
        if dist.get_rank() == 0:
            save("b.pt", state)  # expect: rank_dependent_collective
    """)


def test_framework_collectives_read_from_the_installed_source():
    findings = check("""
    import lightning as L
    from accelerate import Accelerator
    def main(model):
        trainer = L.Trainer(devices=2)
        trainer.fit(model)
        if trainer.is_global_zero:
            trainer.save_checkpoint("last.ckpt")  # expect: rank_dependent_collective
        accelerator = Accelerator()
        if accelerator.is_main_process:
            accelerator.save_state("out")  # expect: rank_dependent_collective
    """)
    by_line = {f.line: f for f in findings}
    save, state = sorted(by_line)
    assert by_line[save].severity.value == "error"
    assert "lightning 2.6.6, installed" in by_line[save].message
    assert by_line[state].severity.value == "warning"  # a collective under FSDP/DeepSpeed
    assert "under some configurations" in by_line[state].message


def test_fsdp_state_dicts_are_collectives():
    check("""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    def main(model, optim):
        model = FSDP(model)
        if dist.get_rank() == 0:
            osd = FSDP.optim_state_dict(model, optim)  # expect: rank_dependent_collective
    """)


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_project_around_a_script_is_read(tmp_path):
    """A helper's barrier in another module of the project, a context manager's barriers, a
    wrapper around dist.* and a relative import: seen where they are called."""
    write(tmp_path, {
        "pyproject.toml": "",
        "proj/__init__.py": "",
        "proj/dist_utils.py": """
            import torch.distributed as dist
            def barrier():
                if dist.is_initialized():
                    dist.barrier()
            def is_main():
                return dist.get_rank() == 0
        """,
        "proj/io.py": """
            from .dist_utils import barrier
            def write_manifest(path):
                barrier()
                open(path, "w").close()
        """,
        "proj/train.py": """
            from proj.dist_utils import is_main
            from proj.io import write_manifest
            def main():
                if is_main():
                    write_manifest("m.json")
        """,
    })
    findings = lint_files([tmp_path / "proj" / "train.py"])
    assert [(f.line, f.kind, f.severity.value) for f in findings] == \
        [(6, "rank_dependent_collective", "error")]
    assert "write_manifest()" in findings[0].message
    assert lint_files([tmp_path / "proj" / "train.py"], follow=False) == []
