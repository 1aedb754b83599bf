"""Which optimizer step hooks are the outermost step's (a wrapper that steps an inner optimizer,
a subclass calling super().step(), a step that raised), and a param group that notes the
lines that changed its settings, pickling and copying as a plain dict."""

from __future__ import annotations

import copy
import pickle

import torch
from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                   register_optimizer_step_pre_hook)

from ddpdoctor.runtime import optimizer_facts as O
from ddpdoctor.runtime import optimizer_steps


class Sharded(torch.optim.Optimizer):
    """Like ZeroRedundancyOptimizer: its step steps a local optimizer, then 'broadcasts'."""

    def __init__(self, params):
        params = list(params)
        super().__init__(params, {"lr": 0.1})
        self.local = torch.optim.SGD(params, lr=0.1)
        self.events: list[str] = []

    def step(self, closure=None):  # type: ignore[override]
        self.local.step()
        self.events.append("broadcast")


class Sub(torch.optim.SGD):
    def step(self, closure=None):  # type: ignore[override]
        return super().step(closure)


class Failing(torch.optim.SGD):
    def step(self, closure=None):  # type: ignore[override]
        raise RuntimeError("boom")


def hooked(events: list):
    """The global hooks as torch_hooks wires them: what each call says."""
    pre = register_optimizer_step_pre_hook(
        lambda opt, a, k: events.append(("enter", type(opt).__name__,
                                         optimizer_steps.entered(opt))))
    post = register_optimizer_step_post_hook(
        lambda opt, a, k: events.append(("leave", type(opt).__name__, optimizer_steps.left())))
    return pre, post


def test_only_the_outermost_step_ends_a_step():
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    events: list = []
    handles = hooked(events)
    try:
        sharded = Sharded([p])
        sharded.step()
        assert events == [("enter", "Sharded", True), ("enter", "SGD", False),
                          ("leave", "SGD", False), ("leave", "Sharded", True)]
        events.clear()
        Sub([p], lr=0.1).step()
        assert [e[2] for e in events if e[0] == "leave"] == [False, True]  # SGD's, then Sub's
        events.clear()
        failing = Failing([p], lr=0.1)
        try:
            failing.step()
        except RuntimeError:
            pass
        torch.optim.SGD([p], lr=0.1).step()  # the failed step left no step under way
        assert events[-2:] == [("enter", "SGD", True), ("leave", "SGD", True)]
    finally:
        for h in handles:
            h.remove()


def test_a_watched_group_notes_lines_that_change_a_setting_and_saves_as_a_dict():
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.AdamW([p], lr=0.1)
    O.watch_groups(opt)
    group = opt.param_groups[0]
    group["lr"] = 0.1  # the same value: no line
    assert group.sites == {}
    for lr in (0.05, 0.04):
        group["lr"] = lr
    group["lr"] = 0.02
    first, last = group.sites["lr"]  # the distinct lines, the latest last
    assert first.endswith(":" + str(_line_of("= lr\n")))
    assert last.endswith(":" + str(_line_of("= 0.02\n")))
    rows, where = O.hyperparameters([opt])
    assert rows[0]["lr"] == 0.02 and rows[0]["sites"] == {"lr": [first, last]}
    assert where[id(p)] == 0
    assert type(pickle.loads(pickle.dumps(group))) is dict
    assert type(copy.deepcopy(opt).param_groups[0]) is dict
    opt.load_state_dict(opt.state_dict())
    O.watch_groups(opt)  # load_state_dict gave plain dicts: watched again
    assert isinstance(opt.param_groups[0], O.WatchedGroup)


def _line_of(ending: str) -> int:
    """The line of this file that ends with ``ending`` (a newline last)."""
    source = open(__file__).read().splitlines(keepends=True)
    return next(i for i, line in enumerate(source, 1) if line.endswith(ending)
                and "_line_of" not in line)
