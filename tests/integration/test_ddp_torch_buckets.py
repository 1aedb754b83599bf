"""`ddpdoctor run --ddp torch`: each bucket is recorded as it is launched, so that a rank
killed without a word (SIGKILL) leaves its buckets in its trace and its peer is not blamed;
with the flight recorder asked for (DDPDOCTOR_DDP_TORCH_BUCKETS=flight_recorder) no bucket
is recorded from Python, and a hang inside a DDP bucket's all-reduce is still named (rank,
seq, "DDP bucket k" at the user's backward line) from the ranks' flight recorder dumps,
also when the recorder's ring wrapped."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import read_trace
from tests.conftest import warmed

pytestmark = pytest.mark.slow

JOB = Path(__file__).resolve().parent / "jobs" / "ddp_torch_bucket_hang.py"
KILLED = Path(__file__).resolve().parent / "jobs" / "ddp_torch_killed.py"


@pytest.mark.parametrize("buffer", ["2000", "40"], ids=["whole", "wrapped"])
def test_a_hang_in_a_bucket_is_named_from_the_flight_recorder(doctor, buffer):
    """30 steps of 2 buckets and a user's all_reduce each (91 collectives before the hang):
    the recorder holds them all, or (40 entries) only its last ones."""
    run = doctor(warmed(["run", "--ddp", "torch", "--hang-timeout", "5", "--nproc-per-node",
                         "2", str(JOB)]), env={"TORCH_FR_BUFFER_SIZE": buffer, "STEPS": "30",
                                               "DDPDOCTOR_DDP_TORCH_BUCKETS": "flight_recorder"})
    assert run.returncode == 124, run.stderr[-3000:]
    findings = run.report["findings"]
    root = findings[0]
    assert (root["kind"], root["severity"], root["ranks"]) == \
        ("collective_mismatch", "error", [1]), root
    assert root["seq"] == 91, root  # the group's own count: buckets and user calls alike
    assert "rank 0: all_reduce(float32[4290], avg, DDP bucket 0) at " \
        "ddp_torch_bucket_hang.py:27" in root["detail"], root["detail"]
    for ring in (run.run_dir / "traces").glob("*.ring"):
        trace = read_trace(ring)
        assert not [r for r in trace.records if r.flags & L.RecordFlag.BUCKET], ring


@pytest.mark.parametrize("nproc", [2, 4])
def test_a_rank_killed_mid_step_leaves_its_buckets(doctor, nproc):
    """Rank 1 is SIGKILLed (as the OOM killer does: no dump at exit) after its third step;
    the others are left in the fourth step's bucket.  Every trace holds its buckets as
    launched, and the killed rank is the one named, with two ranks or four."""
    run = doctor(warmed(["run", "--ddp", "torch", "--hang-timeout", "10", "--nproc-per-node",
                         str(nproc), str(KILLED)]))
    assert run.returncode != 0, run.stderr[-3000:]
    root = next(f for f in run.report["findings"] if f["severity"] == "error")
    assert (root["kind"], root["ranks"]) == ("rank_failed", [1]), root
    assert not [f for f in run.report["findings"]
                if f["severity"] == "error" and set(f["ranks"]) - {1}], run.report["findings"]
    buckets = {}
    for ring in (run.run_dir / "traces").glob("*.ring"):
        trace = read_trace(ring)
        if trace.records:
            buckets[trace.records[0].rank] = [r for r in trace.records
                                              if r.flags & L.RecordFlag.BUCKET]
    assert len(buckets[1]) >= 3 and len(buckets[0]) > len(buckets[1]), buckets
