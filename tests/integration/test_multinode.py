"""Many nodes: two `ddpdoctor run --nnodes 2` on loopback (2 ranks each) through torch's c10d
rendezvous, passing for two hosts (a test host name each; node 1's clock shifted).  Node 0's
supervisor hosts a c10d TCPStore; node 1's copies its run dir there and follows node 0's
verdict; node 0 writes the one report; `ddpdoctor analyze node0 node1` agrees with it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.integration.jobs.ports import free_port

pytestmark = pytest.mark.slow

JOB = Path(__file__).resolve().parent / "jobs" / "collectives.py"
HOSTS = ("node-a", "node-b")
SHIFT_S = "7"  # node 1's clock runs 7 s ahead
SECRET_ENV = "DDPDOCTOR_STORE_SECRET"
SECRET = "the-job-secret-of-this-test"  # the same on both nodes, as the README says



def _start_nodes(tmp_path: Path, env: dict[str, str], hang_timeout: str = "6",
                 shift: str = SHIFT_S, store: int | None = None, job: Path = JOB,
                 relay: int | None = None) -> list[subprocess.Popen]:
    """Node 0 and node 1; ``relay``: the port node 1 reaches node 0's store through."""
    port, store = free_port(), store or free_port()
    procs = []
    for node in (0, 1):
        reach = relay if node == 1 and relay is not None else store
        argv = [sys.executable, "-m", "ddpdoctor.cli", "run", "--run-dir",
                str(tmp_path / f"node{node}"), "--hang-timeout", hang_timeout,
                "--doctor-store", f"127.0.0.1:{reach}",
                "--nnodes", "2", "--node-rank", str(node), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"mn-{port}",
                "--nproc-per-node", "2", str(job)]
        node_env = {**os.environ, SECRET_ENV: SECRET, **env,
                    "DDPDOCTOR_TEST_HOSTNAME": HOSTS[node]}
        if node == 1:
            node_env.update(DDPDOCTOR_TEST_CLOCK_SHIFT_S=shift, NODE_TAG="1")
        procs.append(subprocess.Popen(argv, env=node_env, cwd=tmp_path,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    return procs


def _finish(procs: list[subprocess.Popen]) -> list[tuple[int, str, str]]:
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
    report = json.loads(merged.read_text())
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert done.returncode == (1 if errors else 0), done.stderr[-3000:]
    return report


def _report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "node0" / "report.json").read_text())


def _errors(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["severity"] == "error"]


def test_two_nodes_healthy_one_report(tmp_path):
    results = _finish(_start_nodes(tmp_path, {"BUG": "none"}))
    for node, (code, out, err) in enumerate(results):
        assert code == 0, f"node {node}: {err[-3000:]}"
    assert not (tmp_path / "node1" / "report.json").exists()  # one report: node 0's
    assert "the job's report is on node 0 (host node-a)" in " ".join(results[1][2].split())
    report = _report(tmp_path)
    assert report["outcome"] == "completed" and report["world_size"] == 4
    assert {(r["rank"] // 2, r["host"]) for r in report["ranks"]} <= \
        {(0, "node-a"), (0, "node-b"), (1, "node-a"), (1, "node-b")}
    assert sorted(r["host"] for r in report["ranks"]) == ["node-a"] * 2 + ["node-b"] * 2
    assert {r["state"] for r in report["ranks"]} == {"exited"}
    assert not _errors(report)
    [node1] = [n for n in report["nodes"] if n["node"] == "1"]
    assert node1["host"] == "node-b" and abs(node1["clock_skew_s"] - float(SHIFT_S)) < 0.5
    assert report["membership"][-1]["nodes"] == 2
    assert report["membership"][-1]["world_size"] == 4
    from ddpdoctor.report.build import build_report

    live_view = build_report(tmp_path / "node0", live=True)  # what node 0's UI shows
    assert sorted(r["host"] for r in live_view["ranks"]) == sorted(
        r["host"] for r in report["ranks"])
    merged = _analyze(tmp_path)
    assert merged["outcome"] == "completed" and not _errors(merged)
    assert [r["rank"] for r in merged["ranks"]] == [0, 1, 2, 3]


class _Relay:
    """A TCP relay to node 0's store that passes nothing on until opened: node 1's
    supervisor connects at once but cannot report to node 0 until then (a loaded or slow
    node's first report, late)."""

    def __init__(self, port: int, to: int):
        self.to = to
        self.opened = threading.Event()
        self.server = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def open(self) -> None:
        self.opened.set()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self.server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._relay, args=(near,), daemon=True).start()

    def _relay(self, near: socket.socket) -> None:
        self.opened.wait()
        try:
            far = socket.create_connection(("127.0.0.1", self.to))
        except OSError:
            near.close()
            return
        threading.Thread(target=self._pump, args=(far, near), daemon=True).start()
        self._pump(near, far)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass  # the other side closed: the pump in the other direction ends it too
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed

    def close(self) -> None:
        self.opened.set()
        self.server.close()


def _ranks_in_init(run_dir: Path) -> int:
    """How many ranks node ``run_dir``'s supervisor shows inside init_process_group."""
    try:
        state = json.loads((run_dir / "live.json").read_text())
    except (OSError, ValueError):
        return 0
    return sum(1 for r in state.get("ranks", []) if (r.get("current") or {}).get("op") == "init")


def _wait_for(what, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, f"timed out waiting for {what.__name__}"
        time.sleep(0.2)


LATE_TIMEOUT = 16.0  # the hang timeout of the late-node test (its grace: 8 s)


def test_a_node_whose_ranks_start_late_is_starting_not_hung(tmp_path):
    """Node 0's ranks wait in init_process_group longer than the hang timeout while node 1's
    ranks are still on their way: first not seen at all (node 1 has not reported yet: its
    way to node 0's store opens a timeout after node 0's ranks entered init), then seen
    starting (computing, as a slow `import torch`), then arriving a moment before the
    rendezvous completes.  Slow is not hung: the job ends as without ddpdoctor.  A node that
    never comes is still a hang (tests/unit/test_slow_start.py)."""
    go, store, relay_port = tmp_path / "go", free_port(), free_port()
    relay = _Relay(relay_port, store)
    procs = _start_nodes(tmp_path, {"BUG": "none", "GO_FILE": str(go)},
                         hang_timeout=str(LATE_TIMEOUT), store=store,
                         job=JOB.with_name("late_node.py"), relay=relay_port)
    try:
        def node0_ranks_in_init() -> bool:
            return _ranks_in_init(tmp_path / "node0") >= 2 or any(
                p.poll() is not None for p in procs)

        _wait_for(node0_ranks_in_init)
        time.sleep(LATE_TIMEOUT + 1.5)  # past the timeout: a hang if unseen ranks were absent
        relay.open()

        def node1_ranks_seen() -> bool:
            return len(list((tmp_path / "node0" / "nodes" / "1" / "traces").glob(
                "pid-*.ring"))) >= 2 or any(p.poll() is not None for p in procs)

        _wait_for(node1_ranks_seen)
        time.sleep(2.0)  # seen computing before init
        go.touch()
        results = _finish(procs)
    finally:
        go.touch()
        relay.close()
    for node, (code, out, err) in enumerate(results):
        assert code == 0, f"node {node}: {err[-3000:]}"
    report = _report(tmp_path)
    assert report["outcome"] == "completed" and not _errors(report), report["findings"]
    assert sorted(r["host"] for r in report["ranks"]) == ["node-a"] * 2 + ["node-b"] * 2
    late = sorted(r["rank"] for r in report["ranks"] if r["host"] == "node-b")
    events = [json.loads(line) for line in
              (tmp_path / "node0" / "supervisor.jsonl").read_text().splitlines()]
    said = [e for e in events if e.get("event") == "straggler"]
    assert any(e["ranks"] == late and "not seen yet" in e["message"] for e in said), said
    from ddpdoctor.analysis.load.run_dirs import load_job

    job = load_job([tmp_path / "node0"])
    for r in late:  # node 1's stamps are all on its own (shifted) clock, records included
        run = job.ranks[r]
        assert run.marks and run.marks[0].t_start >= run.header.started_ns


def test_a_barrier_on_node_1_with_its_clock_shifted(tmp_path):
    """The second rank of node 1 calls a barrier the others do not: one report, on node 0,
    names it and its host; both nodes stop (124); `analyze` over both dirs agrees."""
    results = _finish(_start_nodes(tmp_path, {"BUG": "barrier_node1"}))
    for node, (code, out, err) in enumerate(results):
        assert code == 124, f"node {node} ended {code}: {err[-3000:]}"
    assert not (tmp_path / "node1" / "report.json").exists()
    report = _report(tmp_path)
    hosts = {r["rank"]: r["host"] for r in report["ranks"]}
    assert sorted(hosts.values()) == ["node-a"] * 2 + ["node-b"] * 2
    first = _errors(report)[0]
    assert first["kind"] == "collective_mismatch", first
    [culprit] = first["ranks"]
    assert hosts[culprit] == "node-b"
    assert report["ranks"][culprit]["current"]["op"] == "barrier"
    assert all(r["stack"] for r in report["ranks"]), "node 1's stacks, captured on demand"
    node_b = sorted(r for r, h in hosts.items() if h == "node-b")
    dumps = tmp_path / "node0" / "nodes" / "1" / "flight_recorder"
    assert {f"nccl_trace_rank_{r}" for r in node_b} <= {p.name for p in dumps.iterdir()}
    assert len(_errors(report)) == 1  # the ranks that waited are not blamed
    merged = _analyze(tmp_path)
    assert [(f["kind"], f["ranks"], f["seq"]) for f in _errors(merged)] == \
        [(f["kind"], f["ranks"], f["seq"]) for f in _errors(report)]


def _node1_ranks_running(tmp_path: Path) -> bool:
    """Both ranks of node 1 have made collectives (their group events are written)."""
    metas = list((tmp_path / "node1" / "traces").glob("pid-*.meta.jsonl"))
    return sum(1 for m in metas if '"event": "group"' in m.read_text()) >= 2


def test_a_lost_node_is_named_not_blamed(tmp_path):
    """SIGKILL of node 1's supervisor while the job runs: its ranks go on, node 0 hears
    nothing more from them; its report names them unreachable (node_lost), and no rank of
    node 0 is at fault."""
    procs = _start_nodes(tmp_path, {"BUG": "long", "STEPS": "120"}, hang_timeout="8",
                         shift="-5")
    deadline = time.monotonic() + 120
    while not _node1_ranks_running(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2.0)
    os.kill(procs[1].pid, signal.SIGKILL)
    results = _finish(procs)
    code, out, err = results[0]
    assert code == 0, err[-3000:]
    assert "lost contact with node 1 (host node-b)" in " ".join(err.split())
    report = _report(tmp_path)
    [lost] = [f for f in report["findings"] if f["kind"] == "node_lost"]
    node_b = sorted(r["rank"] for r in report["ranks"] if r["host"] == "node-b")
    assert lost["ranks"] == node_b and len(node_b) == 2
    assert {r["state"] for r in report["ranks"] if r["host"] == "node-b"} == {"unreachable"}
    assert not [f for f in _errors(report) if set(f["ranks"]) - set(node_b)]
    _wait_gone(tmp_path / "node1")


def _wait_gone(run_dir: Path) -> None:
    """Node 1's job outlived its supervisor: let it end (120 steps), then kill leftovers."""
    pids = [int(p.name.split("-")[1].split(".")[0]) for p in
            (run_dir / "traces").glob("pid-*.ring")]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.5)
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Is ``pid`` still one of node 1's job processes (not a recycled pid)?"""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"collectives.py" in cmdline


def test_without_a_secret_a_many_node_run_refuses_to_start(tmp_path):
    """No secret (or one too short, or a secret file others can read): each node stops
    before anything starts, one line that shows how to make one, exit 2; with
    --insecure-node-channel the user accepts a channel anyone can join."""
    argv = [sys.executable, "-m", "ddpdoctor.cli", "run", "--run-dir", str(tmp_path / "r"),
            "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "127.0.0.1:1",
            "--nproc-per-node", "1", str(JOB)]
    loose = tmp_path / "secret"
    loose.write_text("a-long-enough-secret-in-a-file\n")
    loose.chmod(0o644)
    for env, extra in (({SECRET_ENV: ""}, []), ({SECRET_ENV: "short"}, []),
                       ({SECRET_ENV: ""}, ["--node-secret-file", str(loose)])):
        done = subprocess.run(argv[:4] + extra + argv[4:], env={**os.environ, **env},
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2, done.stderr[-2000:]
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert not (tmp_path / "r").exists()  # nothing started, no run dir
    assert "export DDPDOCTOR_STORE_SECRET=$(python -c 'import secrets;print(" \
        "secrets.token_hex(32))')" in " ".join(
            subprocess.run(argv, env={**os.environ, SECRET_ENV: ""}, capture_output=True,
                           text=True, timeout=60, check=False).stderr.split())
