"""Healthy replicas stay clean: every way of stepping an optimizer (tests/compat/jobs/
optimizer_matrix.py: torch's optimizers, ZeroRedundancyOptimizer alone and with Join, a
GradScaler that skips a step, a hand-written update, DDP's options) on 2 and 3 ranks, checked
after every step.  The job proves its replicas bit-identical itself (an all_gather of hashes
after each step); ddpdoctor must name no drift, and must have compared every case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, run_doctor

pytestmark = pytest.mark.slow

JOB = REPO / "tests" / "compat" / "jobs" / "optimizer_matrix.py"
# checked as DDP's forward starts: no hooked optimizer holds their parameters
AT_FORWARD = {"hand_written_update"}


def compared_checks(run_dir: Path, world: int) -> dict[int, dict[str, set[int]]]:
    """ddp index -> where checked ("step" / "forward") -> the steps every rank checked."""
    seen: dict[int, dict[str, dict[int, set[int]]]] = {}
    for meta in (run_dir / "traces").glob("*.meta.jsonl"):
        events = [json.loads(line) for line in meta.read_text().splitlines()]
        ranks = [e["rank"] for e in events if e["event"] == "init"]
        if not ranks:
            continue
        for e in events:
            if e["event"] == "replica_check":
                at = seen.setdefault(e["ddp"], {}).setdefault(e.get("at", "step"), {})
                at.setdefault(e["step"], set()).add(ranks[0])
    return {ddp: {at: {s for s, rs in steps.items() if len(rs) == world}
                  for at, steps in ats.items()} for ddp, ats in seen.items()}


@pytest.mark.parametrize("world", [2, 3])
def test_healthy_optimizers_and_options_name_no_drift(world: int, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    run = run_doctor(["run", "--nproc-per-node", str(world), str(JOB), str(out)], tmp_path,
                     env={"DDPDOCTOR_REPLICA_EVERY": "1", "PYTHONWARNINGS": "ignore"},
                     timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    saved = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(world)]
    order = saved[0]["order"]
    assert len(order) == 16
    for name in order:  # ground truth: the job's own hashes agreed after every step
        assert all(saved[0]["identical"][name]), name
    report = run.report
    drift = [f for f in report["findings"] if f["kind"] == "replica_divergence"]
    # the one thing that differs, by design: BatchNorm statistics kept per rank
    assert [(f["severity"], order[f["evidence"]["ddp"]]) for f in drift] == [
        ("info", "broadcast_buffers_false")], [f["summary"] for f in drift]
    assert [f for f in report["findings"] if f["severity"] == "error"] == []
    checks = compared_checks(run.run_dir, world)
    for ddp, name in enumerate(order):
        at = "forward" if name in AT_FORWARD else "step"
        # Join: the ranks' last steps are shadowed (no check while joined)
        want = {"zero_join": 1, "join_then_even": 3}.get(name, 4)
        assert len(checks.get(ddp, {}).get(at, ())) >= want, (name, checks.get(ddp))
