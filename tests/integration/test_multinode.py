"""Many nodes: two `ddpdoctor run --nnodes 2` on loopback (2 ranks each) through torch's c10d
rendezvous; each node writes its own run dir; `ddpdoctor analyze` merges them into the job."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

JOB = Path(__file__).resolve().parent / "jobs" / "collectives.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_nodes(tmp_path: Path, env: dict[str, str], hang_timeout: str = "8"):
    port = _free_port()
    procs = []
    for node in (0, 1):
        argv = [sys.executable, "-m", "ddpdoctor.cli", "run", "--run-dir",
                str(tmp_path / f"node{node}"), "--hang-timeout", hang_timeout,
                "--nnodes", "2", "--node-rank", str(node), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"mn-{port}",
                "--nproc-per-node", "2", str(JOB)]
        procs.append(subprocess.Popen(argv, env={**os.environ, **env}, cwd=tmp_path,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        results.append((p.returncode, out, err))
    return results


def _analyze(tmp_path: Path) -> dict:
    merged = tmp_path / "merged.json"
    done = subprocess.run([sys.executable, "-m", "ddpdoctor.cli", "analyze",
                           str(tmp_path / "node0"), str(tmp_path / "node1"),
                           "--report", str(merged)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(merged.read_text())


def test_two_nodes_healthy(tmp_path):
    results = _run_nodes(tmp_path, {"BUG": "none"})
    for node, (code, out, err) in enumerate(results):
        assert code == 0, f"node {node}: {err[-3000:]}"
    node_ranks = []
    for node in (0, 1):
        report = json.loads((tmp_path / f"node{node}" / "report.json").read_text())
        assert report["outcome"] == "completed"
        assert report["world_size"] == 4
        node_ranks.append({r["rank"] for r in report["ranks"]})
    assert node_ranks[0] | node_ranks[1] == {0, 1, 2, 3}
    assert not node_ranks[0] & node_ranks[1]  # each node reports its own ranks
    merged = _analyze(tmp_path)
    assert merged["outcome"] == "completed"
    assert merged["world_size"] == 4
    assert [r["rank"] for r in merged["ranks"]] == [0, 1, 2, 3]
    assert {r["state"] for r in merged["ranks"]} == {"exited"}
    assert not [f for f in merged["findings"] if f["severity"] == "error"]
    assert len({r["pid"] for r in merged["ranks"]}) == 4


def _report(tmp_path: Path, node: int) -> dict:
    return json.loads((tmp_path / f"node{node}" / "report.json").read_text())


def test_two_nodes_mismatch_on_the_second_node(tmp_path):
    """Rank 3 calls broadcast where ranks 0-2 all-reduce.  (c10d's rendezvous hands out
    ranks in order of arrival, not by --node-rank: the node holding rank 3 is found.)"""
    results = _run_nodes(tmp_path, {"BUG": "op", "CULPRIT": "3"})
    for node, (code, out, err) in enumerate(results):
        assert code != 0, f"node {node} ended as if healthy"
        assert (tmp_path / f"node{node}" / "report.json").is_file(), err[-3000:]
    reports = [_report(tmp_path, n) for n in (0, 1)]
    [culprit_node] = [n for n in (0, 1) if 3 in {r["rank"] for r in reports[n]["ranks"]}]
    own = reports[culprit_node]
    assert own["outcome"] == "hung"
    assert any(f["kind"] == "collective_mismatch" and f["ranks"] == [3]
               for f in own["findings"]), own["findings"]
    other = reports[1 - culprit_node]
    assert other["outcome"] in ("hung", "failed")
    assert [f for f in other["findings"] if f["severity"] == "error"]
    merged = _analyze(tmp_path)
    assert [r["rank"] for r in merged["ranks"]] == [0, 1, 2, 3]
    [mismatch] = [f for f in merged["findings"] if f["kind"] == "collective_mismatch"]
    assert mismatch["ranks"] == [3] and mismatch["seq"] == 6, mismatch
    assert mismatch["evidence"]["calls"]["3"]["op"] == "broadcast"
    assert merged["findings"][0]["kind"] == "collective_mismatch"  # the root cause first
