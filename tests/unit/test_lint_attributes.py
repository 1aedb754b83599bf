"""Rank-dependence that flows through objects: an attribute set from the rank (in ``__init__``,
from a constructor's argument, after construction, on a module-level object) and tested in
another method or function before a collective; each with a healthy twin whose attribute is the
same on every rank (the world size, a constant)."""

from __future__ import annotations

import pytest

from tests.unit.test_lint_rules import check


def test_flag_passed_to_the_constructor_and_kept_in_an_attribute():
    findings = check("""
    class GradNormMonitor:
        def __init__(self, every, is_chief):
            self.every = every
            self.enabled = is_chief

        def on_step_end(self, step, model):
            if not self.enabled or step % self.every:
                return  # expect: rank_dependent_skip
            norm = torch.stack([p.grad.norm() for p in model.parameters()]).norm()
            dist.all_reduce(norm)

    def main():
        rank = dist.get_rank()
        model = nn.Linear(2, 2)
        callbacks = [GradNormMonitor(every=2, is_chief=(rank == 0))]
        for step in range(10):
            for cb in callbacks:
                cb.on_step_end(step, model)
    """)
    assert "is_chief=" in findings[0].message and "GradNormMonitor.enabled" in findings[0].message


def test_flag_passed_to_the_constructor_uniform_twin():
    check("""
    class GradNormMonitor:
        def __init__(self, every, is_chief):
            self.every = every
            self.enabled = is_chief

        def on_step_end(self, step, model):
            if not self.enabled or step % self.every:
                return
            norm = torch.stack([p.grad.norm() for p in model.parameters()]).norm()
            dist.all_reduce(norm)

    def main():
        world_size = dist.get_world_size()
        model = nn.Linear(2, 2)
        callbacks = [GradNormMonitor(every=2, is_chief=(world_size > 1))]
        for step in range(10):
            for cb in callbacks:
                cb.on_step_end(step, model)
    """)


def test_rank_test_kept_in_init_and_read_in_another_method():
    check("""
    class Trainer:
        def __init__(self):
            self.is_main = dist.get_rank() == 0

        def log(self, t):
            if self.is_main:
                dist.all_reduce(t)  # expect: rank_dependent_collective
    """)


def test_uniform_attributes_set_in_init_taint_nothing():
    check("""
    class Trainer:
        def __init__(self, world_size):
            world_size = dist.get_world_size()
            self.world_size = dist.get_world_size()
            self.distributed = world_size > 1
            self.log_every = 10

        def log(self, t, step):
            if self.distributed and step % self.log_every == 0:
                dist.all_reduce(t)
            if self.world_size > 1:
                dist.barrier()
    """)


def test_attribute_set_after_construction():
    check("""
    class Monitor:
        def __init__(self):
            self.enabled = False

        def step(self, t):
            if self.enabled:
                dist.all_reduce(t)  # expect: rank_dependent_collective

    def main():
        rank = dist.get_rank()
        monitor = Monitor()
        monitor.enabled = rank == 0
        monitor.step(torch.ones(1))
    """)


def test_attribute_set_after_construction_uniform_twin():
    check("""
    class Monitor:
        def __init__(self):
            self.enabled = False

        def step(self, t):
            if self.enabled:
                dist.all_reduce(t)

    def main():
        monitor = Monitor()
        monitor.enabled = dist.get_world_size() > 1
        monitor.step(torch.ones(1))
    """)


PROBE = """
from dataclasses import dataclass

@dataclass
class Probe:
    every: int
    enabled: bool = False

    def fire(self, t):
        if self.enabled:
            dist.all_reduce(t)  # expect: rank_dependent_collective
"""


@pytest.mark.parametrize("made", [
    "probe = Probe(every=2, enabled=dist.get_rank() == 0)",
    "probe = Probe(2)\n    probe.enabled = int(os.environ[\"RANK\"]) == 0",
])
def test_dataclass_field_from_the_rank_by_constructor_or_after(made):
    check(PROBE + f"""
def main():
    {made}
    probe.fire(torch.ones(1))
""")


def test_dataclass_field_uniform_twin():
    check("""
    from dataclasses import dataclass

    @dataclass
    class Probe:
        every: int
        enabled: bool = False

        def fire(self, t):
            if self.enabled:
                dist.all_reduce(t)

    def main():
        probe = Probe(every=2, enabled=True)
        probe.enabled = dist.get_world_size() > 1
        probe.fire(torch.ones(1))
    """)


def test_module_level_object_whose_attribute_is_set_under_a_rank_test():
    check("""
    class Flags:
        def __init__(self):
            self.sync_stats = False

    flags = Flags()
    if dist.get_rank() == 0:
        flags.sync_stats = True

    def train_step(t):
        if flags.sync_stats:
            dist.all_reduce(t)  # expect: rank_dependent_collective
    """)


def test_module_level_object_uniform_twin():
    check("""
    class Flags:
        def __init__(self):
            self.sync_stats = False

    flags = Flags()
    if dist.get_world_size() > 1:
        flags.sync_stats = True

    def train_step(t):
        if flags.sync_stats:
            dist.all_reduce(t)
    """)


def test_rank_flag_passed_as_an_argument():
    check("""
    def report(t, verbose):
        if verbose:
            dist.all_reduce(t)  # expect: rank_dependent_collective

    def main():
        report(torch.ones(1), verbose=dist.get_rank() == 0)
    """)
    check("""
    def report(t, verbose):
        if verbose:
            dist.all_reduce(t)

    def main():
        report(torch.ones(1), verbose=dist.get_world_size() > 1)
    """)


def test_a_reassigned_object_forgets_its_attributes():
    check("""
    import types

    def main(rank):
        rank = dist.get_rank()
        box = types.SimpleNamespace()
        box.flag = rank == 0
        if box.flag:
            dist.barrier()  # expect: rank_dependent_collective
        box = types.SimpleNamespace(flag=True)
        if box.flag:
            dist.barrier()
    """)
