"""`ddpdoctor repro` end to end: an 8-rank job with subgroups, p2p, async and object
collectives is replayed call for call; run dirs it cannot replay exit 2 with one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.analysis.load.run_dirs import load_job
from tests.conftest import JOBS, warm_launch

pytestmark = pytest.mark.slow

WORLD = 8


def sequence(run_dir: Path) -> dict[int, dict[str, list[tuple]]]:
    """Per rank, per group: (seq, op, reduce op, shapes, dtypes, root) of each collective;
    under "p2p": (op, peer, shapes, dtypes) of each send and receive, in order."""
    job = load_job([run_dir], stacks=False)
    out: dict[int, dict[str, list[tuple]]] = {}
    for rank, run in job.ranks.items():
        groups = {g: [(c.seq, c.op, c.reduce_op, c.in_shapes, c.dtypes, c.peer) for c in calls]
                  for g, calls in run.calls.items()}
        groups["p2p"] = [(c.op, c.peer, c.in_shapes, c.dtypes)
                         for c in sorted(run.p2p, key=lambda c: c.t_start)]
        out[rank] = groups
    return out


def doctor(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddpdoctor.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=400)


def test_eight_ranks_subgroups_p2p_async_objects_replay_call_for_call(tmp_path):
    job = doctor("run", "--hang-timeout", "60", "--run-dir", str(tmp_path / "job"),
                 *warm_launch(WORLD, JOBS / "repro_mix.py"), cwd=tmp_path)
    assert job.returncode == 0, job.stderr[-3000:]
    made = doctor("repro", str(tmp_path / "job"), "-o", str(tmp_path / "mix_repro.py"),
                  cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    script = (tmp_path / "mix_repro.py").read_text()
    assert "ddpdoctor" not in script.split('"""', 2)[2]  # no import of ddpdoctor (or the job)
    assert "repro_mix" not in script.replace("repro_mix.py:", "").split('"""', 2)[2]
    assert script.count("\n") < 200
    replay = doctor("run", "--hang-timeout", "60", "--run-dir", str(tmp_path / "replay"),
                    *warm_launch(WORLD, tmp_path / "mix_repro.py"), cwd=tmp_path)
    assert replay.returncode == 0, replay.stderr[-3000:]
    recorded, replayed = sequence(tmp_path / "job"), sequence(tmp_path / "replay")
    assert sorted(recorded) == list(range(WORLD))
    for rank in range(WORLD):
        assert replayed[rank] == recorded[rank], f"rank {rank} differs"
    ops = {c[1] for groups in recorded.values() for calls in groups.values() for c in calls}
    assert {"all_gather_object", "broadcast_object_list", "isend", "irecv", "send", "recv",
            "reduce", "broadcast"} <= ops | {c[0] for g in recorded.values() for c in g["p2p"]}
    assert len([g for g in recorded[0] if g not in ("0", "p2p")]) == 1  # its subgroup


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_no_such_dir_exits_2_with_one_line(tmp_path):
    line = one_line_error(doctor("repro", str(tmp_path / "nowhere"), cwd=tmp_path))
    assert "nowhere" in line


def test_empty_dir_exits_2_with_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    one_line_error(doctor("repro", str(tmp_path / "empty"), cwd=tmp_path))
    assert not (tmp_path / "empty" / "repro.py").exists()


def test_run_dir_of_corrupt_traces_exits_2_with_one_line(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "traces").mkdir(parents=True)
    (run_dir / "run.json").write_text('{"command": ["python", "train.py"]}')
    (run_dir / "traces" / "pid-1.ring").write_bytes(b"\x00garbage" * 100)
    line = one_line_error(doctor("repro", str(run_dir), cwd=tmp_path))
    assert "no rank" in line or "nothing to replay" in line
