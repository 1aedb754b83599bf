"""A DTensor's collectives (``full_tensor()``'s all_gather, a Partial's reduce_scatter) go
through torch's functional collectives past the patched ``torch.distributed``: they are
recorded like any other call, at the user's line."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from ddpdoctor.runtime import functional
from ddpdoctor.runtime import recorder


class _Calls:
    """Stands in for the rank's recorder: the calls it was told."""

    def __init__(self) -> None:
        self.begun: list[str] = []
        self.ended: list[int] = []

    def begin(self, op: str, *args: object, **kwargs: object) -> int:
        self.begun.append(op)
        return len(self.begun) - 1

    def end(self, handle: int, failed: bool = False) -> None:
        self.ended.append(handle)

    def note_error(self, where: str, error: BaseException) -> None:
        raise AssertionError(f"{where}: {error}")


@pytest.fixture
def one_rank(tmp_path, monkeypatch):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    functional.install()
    calls = _Calls()
    monkeypatch.setattr(recorder, "_recorder", calls)
    monkeypatch.setattr(recorder, "active", lambda: calls)
    monkeypatch.setattr(recorder, "existing", lambda: calls)
    try:
        yield calls
    finally:
        dist.destroy_process_group()


def test_dtensors_functional_collectives_are_recorded(one_rank) -> None:
    """The calls DTensor makes (torch/distributed/tensor/placement_types.py: full_tensor's
    Shard -> Replicate is ``all_gather_single``, Partial -> Shard ``reduce_scatter_single``;
    a one-rank mesh short-cuts them, so they are called here as DTensor calls them)."""
    import torch.distributed._functional_collectives as funcol

    out = funcol.all_gather_single(torch.ones(2, 2), 0, dist.group.WORLD)
    assert (out + 0).tolist() == [[1.0, 1.0], [1.0, 1.0]]  # used: waited on
    out = funcol.reduce_scatter_single(torch.ones(2), "sum", 0, dist.group.WORLD)
    assert (out + 0).tolist() == [1.0, 1.0]
    assert one_rank.begun == ["all_gather_into_tensor", "reduce_scatter_tensor"]
    assert sorted(one_rank.ended) == [0, 1]
