"""The report of a big job (built from the fast scan's pass) says what the object path says:
the same findings, rank states, current calls and waits; each rank's tail is what
read_trace reads, plus the newest call of every group."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ddpdoctor.analysis.align.fast_scan import scan
from ddpdoctor.analysis.load.run_dirs import load_job
from ddpdoctor.report import build
from ddpdoctor.trace.reader import read_trace
from tests.robustness.test_fast import mutate, program, write_rank


def _job(tmp_path: Path, seed: int) -> Path:
    rnd = random.Random(seed)
    base = program(rnd, rnd.randint(20, 60))
    base[0] = (1, "barrier", "", -1, b"||float32|/job/train.py:5")  # group 7: once, early
    run_dir = tmp_path / "run"
    traces = run_dir / "traces"
    traces.mkdir(parents=True)
    for rank in range(4):
        calls = mutate(rnd, base) if rnd.random() < 0.5 else base
        if rnd.random() < 0.3:
            calls = calls[: rnd.randint(2, len(calls))]  # a rank that stopped early
        write_rank(traces, rank, calls, rnd.choice([16, 128]), {0: "0", 1: "7"}, 9000 + rank)
    (run_dir / "run.json").write_text('{"run_id": "t", "command": ["train.py"]}')
    return run_dir


def _content(report: dict) -> tuple:
    findings = [(f["kind"], f["severity"], f["ranks"], f["seq"], f["caused_by"])
                for f in report["findings"]]
    ranks = [(r["rank"], r["state"], r["last_seq"], r["current"], r["exit_code"])
             for r in report["ranks"]]
    return report["outcome"], findings, ranks, report["waits"]


@pytest.mark.parametrize("seed", range(12))
def test_a_big_jobs_report_says_what_the_object_path_says(tmp_path, monkeypatch, seed):
    run_dir = _job(tmp_path, seed)
    small = build.build_report(run_dir, live=False)
    monkeypatch.setattr(build, "BIG_JOB_RECORDS", 0)  # the same job, taken as a big one
    big = build.build_report(run_dir, live=False)
    # a big job's report reads each rank's tail only: where the whole history singles a
    # rank out of a tie (its own earlier iterations), the tail may not, and the big report
    # then names every side, saying why (never another rank alone)
    for f_big, f_small in zip(big["findings"], small["findings"]):
        if f_big["ranks"] != f_small["ranks"] and "no majority" in f_big["summary"]:
            assert set(f_small["ranks"]) < set(f_big["ranks"])
            f_big["ranks"] = f_small["ranks"]
    assert _content(big) == _content(small)


def test_the_scan_keeps_each_ranks_tail_and_every_groups_newest_call(tmp_path):
    run_dir = _job(tmp_path, 3)
    found = scan([run_dir], tail=4)
    assert len(found.traces) == 4
    job = load_job([run_dir], tail=4, read=found.traces)
    for path, trace in found.traces.items():
        plain = read_trace(path, 4)
        assert [r for r in trace.records if r in plain.records] == plain.records
        assert trace.meta == plain.meta and trace.header == plain.header
        run = job.ranks[trace.header.rank]
        assert run.last_call("7") is not None, "group 7's newest call was left out"
