"""`ddpdoctor repro` from run dirs that `ddpdoctor attach` wrote (facts.json) and from torch
flight recorder dumps: what is known is replayed, and the script is valid Python."""

from __future__ import annotations

import json
from pathlib import Path

from ddpdoctor.analysis.model import Call
from ddpdoctor.analysis.load.external import FACTS_FILE, external_run, facts_of
from ddpdoctor.repro.emit import script_text
from ddpdoctor.repro.facts import Ending, read_job
from ddpdoctor.trace import layout as L
from tests.unit.flight_recorder_factory import entry, write_dump

TRAIN = """import torch.distributed as dist
def evaluate(rank, x):
    if rank == 0:
        dist.barrier()
    dist.all_reduce(x)
"""


def open_call(rank: int, op: str, site: str, shapes=(), dtypes=()) -> Call:
    return Call(rank=rank, group="0", seq=0, op=op,
                reduce_op="sum" if op == "all_reduce" else "", in_shapes=shapes, dtypes=dtypes,
                callsite=site, t_start=1_000 + rank, t_end=0, kind=L.RecordKind.COLLECTIVE)


def attached_run_dir(tmp_path: Path) -> Path:
    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    run_dir = tmp_path / "attached"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"command": ["torchrun", "train.py"]}))
    runs = {0: external_run(0, 2, 100, "h", run_dir, {"0": [open_call(0, "barrier",
                                                                      f"{train}:4")]},
                            {"0": [0, 1]}),
            1: external_run(1, 2, 101, "h", run_dir, {"0": [open_call(
                1, "all_reduce", f"{train}:5", ((4,),), ("float32",))]}, {"0": [0, 1]})}
    (run_dir / FACTS_FILE).write_text(json.dumps(facts_of(runs)))
    return run_dir


def test_attach_facts_replay_the_call_each_rank_was_in(tmp_path):
    job = read_job(attached_run_dir(tmp_path))
    assert job.source == "ddpdoctor attach"
    assert [len(p.steps) for p in job.plans] == [1, 1]
    assert all(p.ending == Ending.HANGS for p in job.plans)
    text = script_text(job)
    compile(text, "repro.py", "exec")
    assert "at_4(dist.barrier)" in text and "at_5(dist.all_reduce, z(4))" in text
    barrier_site = text[text.index("def at_4"):text.index("def at_5")]
    assert "if RANK_DEPENDENT" in barrier_site  # the job's own `if rank == 0:`
    assert "only that call is replayed" in " ".join(text.split())


def test_flight_recorder_dumps_replay_their_sequence(tmp_path):
    write_dump(tmp_path, 0, [entry(1), entry(2, "barrier", sizes=[], retired=False)], 1)
    write_dump(tmp_path, 1, [entry(1), entry(2, retired=False)], 1)
    job = read_job(tmp_path)
    assert job.source == "torch flight recorder dumps" and job.world_size == 2
    assert [[s.op for s in p.steps] for p in job.plans] == [["all_reduce", "barrier"],
                                                             ["all_reduce", "all_reduce"]]
    text = script_text(job)
    compile(text, "repro.py", "exec")
    assert text.count("dist.all_reduce(z(10))") == 2 and "dist.barrier()" in text
    assert "if who == 0:" in text
