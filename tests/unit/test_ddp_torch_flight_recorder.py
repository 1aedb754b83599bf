"""`--ddp torch` on the default gloo group with torch's flight recorder on: torch's reducer
keeps torch's own group (no Python per bucket), the trace says once that the buckets are
left to the recorder, and the recorder's dump has them (a one-rank gloo group in this
process)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from ddpdoctor.ddp import comm_hook, recorded_group, swap
from ddpdoctor.runtime import recorder
from tests.unit.test_comm_hook import _ThreeLayers
from tests.unit.test_recorded_group import _PATCHED


class _Events:
    """Stands in for the rank's recorder: ``ddp_buckets`` events kept, a record a failure."""

    enabled = True
    steps = 0  # optimizer steps (the replica checks read it)
    rank = 0

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def meta(self, event: str, **fields: Any) -> None:
        if event == "ddp_buckets":
            self.events.append({"event": event, **fields})

    def begin_described(self, *args: Any, **kwargs: Any) -> int:
        raise AssertionError(f"a bucket recorded from Python: {args}")

    begin = begin_described

    def note_error(self, where: str, error: BaseException) -> None:
        raise AssertionError(f"{where}: {error}")


@pytest.fixture
def fr_torch_mode(tmp_path, monkeypatch):
    """A one-rank gloo group with the flight recorder on and asked for, torch's DDP patched
    as `ddpdoctor run --ddp torch` patches it, and a stand-in recorder."""
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "200")
    monkeypatch.setenv(recorded_group.BUCKETS_ENV, "flight_recorder")
    monkeypatch.setattr(recorded_group, "_exit_dump", {"registered": True})  # no atexit
    events = _Events()
    monkeypatch.setattr(recorder, "_recorder", events)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    cls = nn.parallel.DistributedDataParallel
    swap._patch_ddp_class(cls, comm_hook.HookMode.ALLREDUCE)
    try:
        yield cls, events
    finally:
        for name in _PATCHED:
            setattr(cls, name, getattr(cls, name).__ddpdoctor_original__)
        dist.destroy_process_group()


def _dump() -> dict:
    return json.loads(torch._C._distributed_c10d._dump_fr_trace_json(True, False))


def _last_record_id() -> int:
    return max((e["record_id"] for e in _dump()["entries"]), default=-1)


def test_buckets_go_to_torchs_group_and_its_flight_recorder(fr_torch_mode) -> None:
    ddp_class, events = fr_torch_mode
    ddp = ddp_class(_ThreeLayers(), bucket_cap_mb=0.01)  # a bucket a layer
    assert type(recorded_group.group_of(ddp)).__name__ == "FlightRecordedBuckets"
    assert comm_hook.state_of(ddp) is None  # no hook either
    numel = sum(p.numel() for p in ddp.parameters())
    assert events.events == [{"event": "ddp_buckets", "source": "flight_recorder",
                               "group": "0", "numel": numel}]
    before = _last_record_id()  # (the recorder is the process's: earlier tests' entries)
    for _ in range(3):
        ddp(torch.ones(3, 4)).sum().backward()
    floats = [e["input_sizes"][0][0] for e in _dump()["entries"] if e["record_id"] > before
              and e["profiling_name"] == "gloo:all_reduce" and e["input_dtypes"] == ["Float"]]
    assert sum(floats) == 3 * numel  # every bucket of the three passes, in the recorder


def test_by_default_buckets_are_recorded_as_launched(fr_torch_mode, monkeypatch) -> None:
    """The recording group unless the flight recorder is asked for: a rank killed without a
    dump keeps its buckets, and the live seqs count them."""
    ddp_class, events = fr_torch_mode
    monkeypatch.delenv(recorded_group.BUCKETS_ENV)
    ddp = ddp_class(_ThreeLayers(), bucket_cap_mb=0.01)
    assert isinstance(recorded_group.group_of(ddp), recorded_group.RecordedGroup)
    assert events.events == []


def test_without_the_flight_recorder_buckets_are_recorded_from_python(
        tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(recorded_group.BUCKETS_ENV, "flight_recorder")
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "0")
    assert not recorded_group.flight_recorded(None)
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "2000")
    assert recorded_group.flight_recorded(None)  # (None: the default group)
