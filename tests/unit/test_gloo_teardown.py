"""The exit settle for gloo's teardown, in this process (gloo, world 1): destroyed groups
outlive destroy_process_group until exit, with a recorder or without one (recording
failed: the job still gets the settle)."""

from __future__ import annotations

import time

import torch.distributed as dist

from ddpdoctor.runtime import gloo_teardown, patches
from ddpdoctor.runtime import recorder as R


def _init() -> object:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return dist.group.WORLD


def _timed_settle(settle_s: float) -> float:
    t0 = time.monotonic()
    gloo_teardown.settle(settle_s)
    return time.monotonic() - t0


def test_destroyed_groups_kept_until_exit_without_a_recorder(monkeypatch):
    monkeypatch.setattr(R, "_recorder", None)
    destroy = patches._wrap_destroy(getattr(dist.destroy_process_group,
                                            "__ddpdoctor_original__",
                                            dist.destroy_process_group))
    world = _init()
    destroy()
    assert not dist.is_initialized()
    assert any(g is world for g in gloo_teardown._kept)
    assert _timed_settle(0.05) >= 0.05  # the workers' time, with the GIL free
    assert gloo_teardown._kept == []


def test_settle_waits_for_live_groups_only():
    assert gloo_teardown._kept == []
    assert _timed_settle(0.5) < 0.25  # no group ever: the exit is not slowed
    _init()
    try:
        assert _timed_settle(0.05) >= 0.05  # never destroyed: settles too
    finally:
        dist.destroy_process_group()
        gloo_teardown.settle(0)


def test_destroying_a_subgroup_keeps_nothing(monkeypatch):
    monkeypatch.setattr(R, "_recorder", None)
    destroy = patches._wrap_destroy(getattr(dist.destroy_process_group,
                                            "__ddpdoctor_original__",
                                            dist.destroy_process_group))
    _init()
    try:
        sub = dist.new_group([0])
        destroy(sub)
        assert gloo_teardown._kept == []
    finally:
        destroy()
        gloo_teardown.settle(0)
