"""A link that stopped: a `ddpdoctor run` job of two nodes, one in each of two network
namespaces (tests/integration/two_hosts.py), trains a tiny DDP model; mid-training host A
drops every packet to host B's data address (a blackhole route).  Every rank then waits in
the gradient all-reduce and none progresses: node 0's report is a stalled_call that names
the link between the hosts and blames no rank.  Without the cut the same job completes."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.two_hosts import TwoHosts, unavailable

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))]

JOB = Path(__file__).resolve().parent / "jobs" / "link_train.py"
HOSTS = ("node-a", "node-b")
RDZV_PORT, STORE_PORT = 29400, 29401  # inside fresh namespaces: nothing else binds there
READY_S = 180.0  # both nodes started, rendezvous done, five steps trained
END_S = 180.0


@pytest.fixture
def hosts():
    two = TwoHosts()
    try:
        two.create()
        yield two
    finally:
        two.remove()  # the namespaces, their veths and addresses, even on failure


def _start(hosts: TwoHosts, tmp_path: Path, pause: Path) -> list[subprocess.Popen]:
    """Node 0 on host A (pausing after step 4 until told to go on), node 1 on host B:
    torchrun's rendezvous and ddpdoctor's nodes' store on the control network, gloo on the
    data network."""
    secret = secrets.token_hex(16)
    procs = []
    for node in (0, 1):
        argv = hosts.run_in(node) + [
            sys.executable, "-m", "ddpdoctor.cli", "run",
            "--run-dir", str(tmp_path / f"node{node}"), "--hang-timeout", "6", "--doctor-store", f"{hosts.ctl_ip(0)}:{STORE_PORT}", "--",
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
            "--node-rank", str(node), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{hosts.ctl_ip(0)}:{RDZV_PORT}", "--rdzv-id", "link",
            "--rdzv-conf", f"is_host={int(node == 0)}", "--local-addr", hosts.ctl_ip(node),
            "--nproc-per-node", "1", str(JOB)]
        env = {**os.environ, "DDPDOCTOR_STORE_SECRET": secret,
               "DDPDOCTOR_TEST_HOSTNAME": HOSTS[node],
               "GLOO_SOCKET_IFNAME": hosts.data_if(node)}
        if node == 0:
            env["LINK_PAUSE_DIR"] = str(pause)
        procs.append(subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return procs


def _run(hosts: TwoHosts, tmp_path: Path, cut: bool) -> list[tuple[int, str, str]]:
    """The job, with the link cut while host A's rank pauses after step 4 (or not)."""
    pause = tmp_path / "pause"
    pause.mkdir()
    procs = _start(hosts, tmp_path, pause)
    try:
        deadline = time.monotonic() + READY_S
        while not (pause / "ready").exists():
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                break
            time.sleep(0.05)
        if cut:
            hosts.cut()
        (pause / "go").write_text("")
        results = []
        for p in procs:
            out, err = p.communicate(timeout=END_S)
            results.append((p.returncode, out, err))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


def _report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "node0" / "report.json").read_text())


def test_a_link_cut_mid_training_is_a_stalled_call_naming_it(hosts, tmp_path):
    results = _run(hosts, tmp_path, cut=True)
    assert (tmp_path / "pause" / "ready").exists(), results[0][2][-3000:]
    assert results[0][0] == 124, results[0][2][-3000:]  # ddpdoctor stopped the hung job
    report = _report(tmp_path)
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert errors and errors[0]["kind"] == "stalled_call", [
        (f["kind"], f["ranks"], f["summary"]) for f in report["findings"]]
    stall = errors[0]
    assert stall["ranks"] == [0, 1]
    assert "stalled on the link node-a -> node-b" in stall["summary"]
    assert stall["summary"].endswith("no rank is at fault")
    links = stall["evidence"]["links"]
    assert links and all(k["path"] == ["node-a", "node-b"] for k in links), links
    assert {(k["from_host"], k["to_host"]) for k in links} <= {HOSTS, HOSTS[::-1]}
    assert any(k["from_host"] == "node-a" and k["unacked_bytes"] > 0 for k in links)
    assert all(k["to_rank"] in (0, 1) and k["idle_s"] is not None for k in links)
    blamed = [f for f in errors if len(f["ranks"]) == 1]
    assert not blamed, [(f["kind"], f["ranks"], f["summary"]) for f in blamed]
    box = " ".join(results[0][1].replace("│", " ").split())  # the console summary: stdout
    assert "stalled on the link node-a -> node-b" in box and "no rank is at fault" in box


def test_without_the_cut_the_same_job_completes(hosts, tmp_path):
    results = _run(hosts, tmp_path, cut=False)
    for node, (code, _, err) in enumerate(results):
        assert code == 0, f"node {node}: {err[-3000:]}"
    report = _report(tmp_path)
    assert report["outcome"] == "completed"
    assert not [f for f in report["findings"] if f["severity"] == "error"]
