"""Trust, round two: each class of attack, tried as another user on the host (uid 65534, by
``setpriv``), as a relay on loopback, or as a hostile file, is refused or bounded.

The nodes' channel: frames of an earlier job replayed by a relay, a port squatted before the
job, a peer that trickles or does not read.  Paths: a run dir made in a directory another user
owns.  Input: flight recorder dumps, run-dir files and traces that lie, links to /dev/zero,
FIFOs.  The terminal: escape sequences from a report, the UI, lint and run's notices.  The
ranks' environment: no secret."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

import pytest

from tests.integration.test_multinode import _Relay

from .helpers import JOBS, free_port, run_doctor, wait_until

NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
AS_NOBODY = os.geteuid() == 0 and shutil.which("setpriv") is not None
needs_nobody = pytest.mark.skipif(not AS_NOBODY, reason="another uid needs root and setpriv")
SECRET = "the-secret-of-this-two-node-job"
PYTHON = os.path.realpath(sys.executable)
TRAIN = Path(__file__).resolve().parents[1] / "integration" / "jobs" / "collectives.py"
# what a terminal acts on: OSC (clipboard 52, title, hyperlink 8), a screen clear, a C1 CSI,
# a bell, a bidirectional override, a markup hyperlink for rich
HOSTILE = ("\x1b]52;c;cHduZWQ=\x07 \x1b[2J\x1b[H \x1b]8;;http://evil/\x1b\\here\x1b]8;;\x1b\\ "
           "\x9b31m \x9d0;title\x9c \u202e [link=http://evil/]x[/link]")
TERMINAL_COMMANDS = ("\x1b]", "\x1b[2J", "\x1b[H", "\x9b", "\x9d", "\x9c", "\x07", "\u202e")


def _nobody(code: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` (Python, standard library only) as uid 65534."""
    return subprocess.run([*NOBODY, PYTHON, "-I", "-S", "-c", code, *args], input=stdin,
                          capture_output=True, text=True, timeout=60, check=True)


@pytest.fixture
def open_tmp():
    """A directory of root's under /tmp that another user can reach (pytest's own are
    closed to others), removed after the test."""
    d = Path(tempfile.mkdtemp(prefix="ddpdoctor-trust-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _shared_dir(parent: Path, name: str) -> Path:
    """A directory anyone may write (sticky, as /tmp), root's."""
    d = parent / name
    d.mkdir()
    d.chmod(0o1777)
    return d


def _no_command(text: str) -> list[str]:
    return [c for c in TERMINAL_COMMANDS if c in text]


# -- the nodes' channel: replay ----------------------------------------------------------

class FrameRelay(_Relay):
    """A relay on loopback between a node and node 0 (test_multinode's, open from the
    start), frame-aware toward the node: it records every frame node 0 sends, and can
    inject frames between them."""

    def __init__(self, to_port: int):
        self.port = free_port()
        self.recorded: list[bytes] = []
        self.inject: list[bytes] = []  # sent to the node before node 0's next frame
        self.repeat_next = False  # send node 0's next frame twice (a replay within)
        super().__init__(self.port, to_port)
        self.open()

    def _relay(self, near: socket.socket) -> None:
        deadline = time.monotonic() + 10
        while True:  # node 0 may not listen yet: as a node retries, the relay does
            try:
                far = socket.create_connection(("127.0.0.1", self.to))
                break
            except OSError:
                if time.monotonic() > deadline:
                    near.close()
                    return
                time.sleep(0.1)
        threading.Thread(target=self._pump, args=(near, far), daemon=True).start()
        self._down(far, near)

    def _down(self, src: socket.socket, dst: socket.socket) -> None:
        buf = b""
        try:
            while data := src.recv(65536):
                buf += data
                while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
                    size = 4 + struct.unpack(">I", buf[:4])[0]
                    frame, buf = buf[:size], buf[size:]
                    self.recorded.append(frame)
                    while self.inject:
                        dst.sendall(self.inject.pop(0))
                    dst.sendall(frame * (2 if self.repeat_next else 1))
                    self.repeat_next = False
        except OSError:
            pass



def _sealed(relay: FrameRelay, topics: set[bytes]) -> list[bytes]:
    """The frames of ``topics`` the relay saw node 0 send (past the handshake: a counter, a
    seal, then the topic), once each has come."""
    def found() -> list[bytes]:
        return [f for f in relay.recorded if f[44:].split(b"\n", 1)[0] in topics]

    assert wait_until(lambda: {f[44:].split(b"\n", 1)[0] for f in found()} == topics, 15, 0.05)
    return found()


def _nodes(tmp_path: Path, tag: str, reach_port=None):
    """Node 0's link and node 1's (through ``reach_port`` when given), on loopback, with the
    secret; what each logs is kept."""
    from ddpdoctor.supervisor.node_auth import channel_key
    from ddpdoctor.supervisor.node_follower import NodeFollower
    from ddpdoctor.supervisor.node_leader import NodeLeader
    from ddpdoctor.supervisor.node_store import NodeSetup, open_hub

    setup = NodeSetup("127.0.0.1", free_port(), 2, None)
    logs: list[tuple[str, dict]] = []
    log = lambda event, **fields: logs.append((event, fields))  # noqa: E731
    leader = NodeLeader(lambda: open_hub(setup, channel_key(SECRET),
                                         lambda key, why, n: log("store_refused", why=why)),
                        lambda attempt: tmp_path / f"{tag}-node0", lambda *a: None, log, 30.0,
                        expected=1)
    leader.start()
    node1 = tmp_path / f"{tag}-node1"
    (node1 / "traces").mkdir(parents=True)
    port = reach_port(setup.port) if reach_port else setup.port
    follower = NodeFollower(NodeSetup("127.0.0.1", port, 2, 1), "1", lambda: (0, node1), 30.0,
                            SECRET, log)
    follower.start()
    assert wait_until(lambda: "1" in leader.nodes and leader.nodes["1"].host != "", 30, 0.05)
    return leader, follower, logs


def test_a_relay_replaying_an_earlier_jobs_frames_is_refused(tmp_path):
    """A relay records everything node 0 of an earlier job (the same secret) sends node 1:
    its verdict (stop, 124) and its final word (the old report).  In the next, healthy job
    it injects those frames into node 1's connection, and sends one of this job's frames
    twice: node 1 refuses each (not sealed in this connection's session; out of order),
    keeps no verdict and no final word, and takes this job's own when they come."""
    relays: list[FrameRelay] = []

    def relayed(port: int) -> int:
        relays.append(FrameRelay(port))
        return relays[-1].port

    leader_a, follower_a, _ = _nodes(tmp_path, "a", relayed)
    leader_a.publish_verdict("hang", "the old job hung", True, 124)
    leader_a.publish_final("/old/report.json", "hung", "old-host")
    assert follower_a.final is not None
    old_frames = _sealed(relays[0], {b"verdict", b"final"})  # node 0's word in the old job
    follower_a.close()
    leader_a.close()

    leader_b, follower_b, logs = _nodes(tmp_path, "b", relayed)
    relays[1].inject = list(old_frames)
    relays[1].repeat_next = True
    leader_b.request_stacks([0])  # a frame of this job to carry the injection, sent twice
    refused = lambda: [f["why"] for e, f in logs if e == "store_refused"]  # noqa: E731
    assert wait_until(lambda: len(refused()) >= len(old_frames) + 1, 15, 0.05), refused()
    refused = refused()
    assert any("bad seal" in why for why in refused), refused
    assert any("out of order" in why for why in refused), refused
    assert follower_b.verdict is None and follower_b.final is None
    assert follower_b.asks and follower_b.asks[0][1] == [0]  # this job's own frame, once
    leader_b.publish_verdict("hang", "this job's word", False, 0)
    assert wait_until(lambda: follower_b.verdict is not None, 15, 0.05)
    assert follower_b.verdict["message"] == "this job's word" and not follower_b.verdict["stop"]
    follower_b.close()
    leader_b.close()
    for relay in relays:
        relay.close()


# -- the nodes' channel: a squatted port --------------------------------------------------

SQUATTER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16); print("listening", flush=True)
s.settimeout(0.2)
end = time.time() + 60
while time.time() < end and sys.stdin.readable():
    try:
        c, _ = s.accept(); c.sendall(b"HTTP/1.0 200 OK\\r\\n\\r\\n"); c.close()
    except OSError:
        pass
"""


@needs_nobody
def test_a_squatted_port_is_an_error_on_every_node(tmp_path, monkeypatch):
    """Another user listens on the nodes' channel port first: node 0 stops before its job
    with one line naming the port and the squatter's uid (exit 2), a node that follows
    stops the same way, and a node whose node 0 is taken over later says so, as an error,
    instead of quietly deciding alone."""
    port = free_port()
    squatter = subprocess.Popen([*NOBODY, PYTHON, "-I", "-S", "-c", SQUATTER, str(port)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout.readline().strip() == "listening"
        for rank, why in (("0", "is taken (listening: uid 65534)"),
                          ("1", "does not prove this job's secret (listening: uid 65534)")):
            run = run_doctor(["run", "--run-dir", str(tmp_path / f"node{rank}"),
                              "--doctor-store", f"127.0.0.1:{port}", "--nnodes", "2",
                              "--node-rank", rank, "--rdzv-backend", "c10d",
                              "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
                              "--nproc-per-node", "1", str(TRAIN)],
                             env={"DDPDOCTOR_STORE_SECRET": SECRET}, timeout=60)
            assert run.returncode == 2 and why in run.stderr, run.stderr[-2000:]
            assert len(run.stderr.strip().splitlines()) == 1, run.stderr
            assert not (tmp_path / f"node{rank}").exists()  # nothing started
        from ddpdoctor.supervisor import node_follower
        from ddpdoctor.supervisor.node_follower import NodeFollower
        from ddpdoctor.supervisor.node_store import NodeSetup

        monkeypatch.setattr(node_follower, "CONNECT_S", 2.0)
        follower = NodeFollower(NodeSetup("127.0.0.1", port, 2, 1), "1",
                                lambda: (0, tmp_path), 30.0, SECRET, lambda *a, **k: None)
        follower.start()
        assert wait_until(lambda: not follower.linked, 20, 0.05)
        assert follower.unproven and "does not prove this job's secret" in follower.failed
    finally:
        squatter.kill()
        squatter.wait()


# -- the nodes' channel: a slow peer ------------------------------------------------------

def _peer(port: int, mode: str, name: str) -> subprocess.Popen:
    argv = [PYTHON, "-I", "-S", str(JOBS / "node_trickler.py"), str(port), mode, name]
    proc = subprocess.Popen(NOBODY + argv if AS_NOBODY else argv, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdin.write(SECRET + "\n")
    proc.stdin.flush()
    return proc


def test_one_slow_peer_never_stalls_node_0(tmp_path, monkeypatch):
    """A peer with the secret (another uid) begins a message and trickles a byte every 0.3 s:
    node 0 goes on reading node 1 all the while (node 1 pushes every 0.25 s: its news stays
    fresh) and closes the trickler once its message is not whole after the deadline (a
    blocking read would wait on it for the whole window: 1,000 bytes at one each 0.3 s).
    Another reads nothing while
    node 0 sends it more than its buffers hold: node 0 closes it once its unread bytes pass
    the bound or it read nothing for the deadline, and node 1 gets every request meanwhile."""
    from ddpdoctor.supervisor import node_frames

    monkeypatch.setattr(node_frames, "MESSAGE_S", 2.0)
    monkeypatch.setattr(node_frames, "MAX_OUTBOX", 1 << 20)
    monkeypatch.setattr(node_frames, "SEND_S", 3.0)
    leader, follower, logs = _nodes(tmp_path, "s")
    port = leader.hub.listener.getsockname()[1]
    trickler, deaf = _peer(port, "trickle", "7"), _peer(port, "deaf", "8")
    refused = lambda: [f["why"] for e, f in logs if e == "store_refused"]  # noqa: E731
    try:
        assert wait_until(lambda: {"7", "8"} <= set(leader.nodes), 20, 0.05)
        worst, start = 0.0, time.monotonic()
        while time.monotonic() - start < 4.0:
            worst = max(worst, time.monotonic() - leader.nodes["1"].last_seen)
            time.sleep(0.05)
        assert worst < 2.5, f"node 1's news was {worst:.1f} s old"  # it pushes every 0.25 s
        out, _ = trickler.communicate(timeout=30)
        assert json.loads(out)["closed_after_s"] < 6.0, out  # the deadline, not 40 s
        assert any("not whole after" in why for why in refused()), refused()
        asked = [leader.request_stacks(list(range(20000))) for _ in range(40)]  # 4.6 MB
        deaf_closed = lambda: [w for w in refused() if "wait unread" in w or  # noqa: E731
                               "nothing it was sent read" in w]
        assert wait_until(deaf_closed, 30, 0.05), refused()
        assert wait_until(lambda: len(follower.asks) == len(asked), 30, 0.05)
        assert not leader.nodes["1"].lost
    finally:
        for p in (trickler, deaf):
            p.kill()
            p.communicate()
        follower.close()
        leader.close()


# -- paths: a planted parent --------------------------------------------------------------

@needs_nobody
def test_a_run_dir_in_another_users_directory_is_refused(open_tmp):
    """In a shared sticky directory another user made ./ddpdoctor-runs (theirs, open to all),
    ready to swap the run dir root makes in it for a link after every check: `run` there
    stops with one line naming that directory and its owner (exit 2); nothing is created in
    it, and the file a link would have led to is untouched."""
    shared = _shared_dir(open_tmp, "shared")
    victim = open_tmp / "victim"
    victim.mkdir(mode=0o700)
    _nobody("import os, sys; os.mkdir(sys.argv[1] + '/ddpdoctor-runs', 0o777); "
            "os.chmod(sys.argv[1] + '/ddpdoctor-runs', 0o777)", str(shared))
    runs = shared / "ddpdoctor-runs"
    for args in (["run", "--nproc-per-node", "1", str(TRAIN)],
                 ["run", "--run-dir", str(runs / "mine"), "--nproc-per-node", "1", str(TRAIN)]):
        run = run_doctor(args, cwd=shared, timeout=60)
        assert run.returncode == 2, run.stderr[-2000:]
        assert "ddpdoctor-runs belongs to uid 65534" in run.stderr, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert os.listdir(runs) == [] and os.listdir(victim) == []


def test_a_checked_directory_is_written_where_it_was_checked(tmp_path):
    """A directory opened through checked descriptors and then swapped for a link (the attack
    a writable parent allows): every file still lands in the directory that was checked,
    none through the link."""
    from ddpdoctor.rundir.safe_path import CheckedDir

    run, victim = tmp_path / "run", tmp_path / "victim"
    run.mkdir(mode=0o700)
    victim.mkdir(mode=0o700)
    with CheckedDir(run) as d:
        os.rename(run, tmp_path / "moved")
        run.symlink_to(victim)
        os.close(d.open_new(".report.json.tmp"))
        d.replace(".report.json.tmp", "report.json")
        os.close(d.open_append("supervisor.jsonl"))
    assert os.listdir(victim) == []
    assert sorted(os.listdir(tmp_path / "moved")) == ["report.json", "supervisor.jsonl"]


def test_a_sticky_shared_directory_is_fine_and_a_link_of_another_user_is_not(tmp_path):
    """A run dir of root's in a sticky shared directory (/tmp-like) is made; one reached
    through a link another user owns, or inside a directory another user can write (not
    sticky), is refused: one line, exit 2."""
    from ddpdoctor.errors import UserError
    from ddpdoctor.rundir.layout import make_run_dir

    shared = _shared_dir(tmp_path, "shared")
    assert make_run_dir(shared / "mine", "x").is_dir()
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    with pytest.raises(UserError, match="loose can be written by others"):
        make_run_dir(loose / "run", "x")
    if AS_NOBODY:
        os.lchown(shared, 0, 0)
        link = shared / "link"
        link.symlink_to(tmp_path)
        os.lchown(link, 65534, 65534)
        with pytest.raises(UserError, match="link is a link of uid 65534"):
            make_run_dir(link / "run", "x")


# -- hostile input ------------------------------------------------------------------------

def _dump(rank: int, **extra) -> str:
    entry = {"collective_seq_id": 1, "profiling_name": "gloo:all_reduce", "pg_id": 0,
             "process_group": ["0", "default_pg"], "input_sizes": [[4]],
             "input_dtypes": ["Float"], "retired": True, "time_created_ns": 1000}
    return json.dumps({"version": "2.10", "rank": rank, "entries": [entry],
                       "pg_config": {"": {"ranks": json.dumps(list(range(2)))}}, **extra})


HOSTILE_FILES = r"""
import json, os, sys
top = sys.argv[1]
def put(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
dumps = json.loads(sys.stdin.read())
for name, text in dumps.items():
    put(os.path.join(top, name), text)
for name in ("zero", "fifo", "meta"):
    os.makedirs(os.path.join(top, name, "traces"))
    put(os.path.join(top, name, "run.json"), "{}")
os.symlink("/dev/zero", os.path.join(top, "zero", "traces", "pid-1.ring"))
os.mkfifo(os.path.join(top, "fifo", "traces", "pid-1.ring"))
os.mkfifo(os.path.join(top, "meta", "traces", "pid-1.meta.jsonl"))
"""


@needs_nobody
def test_hostile_files_are_one_line_errors_never_a_hang(open_tmp):
    """Files another user wrote: a flight recorder dump naming a member rank of a million,
    one nested 100,000 deep, one holding a number of 400 digits and one of 1e999; run dirs
    whose trace is a link to /dev/zero or a FIFO, or whose meta log is a FIFO: `analyze` of
    each is one line on stderr and exit 2, within seconds, never a traceback, a hang or
    "No problem found"."""
    tmp_path = open_tmp
    top = tmp_path / "theirs"
    top.mkdir()
    os.chown(top, 65534, 65534)
    deep = "[" * 100_000 + "]" * 100_000
    files = {"million/fr-0": _dump(0, pg_config={"": {"ranks": [0, 1_000_000]}}),
             "million/fr-1": _dump(1),
             "deep/fr-0": _dump(0).replace('"entries"', f'"deep": {deep}, "entries"'),
             "digits/fr-0": _dump(0).replace('"rank": 0', '"rank": ' + "9" * 400),
             "inf/fr-0": _dump(0).replace('"time_created_ns": 1000', '"time_created_ns": 1e999')}
    _nobody(HOSTILE_FILES, str(top), stdin=json.dumps(files))
    _one_rank(tmp_path / "ring")  # a real trace beside the FIFO meta log
    shutil.copy(next((tmp_path / "ring").glob("*.ring")), top / "meta" / "traces" / "pid-1.ring")
    for name, why in (("million", "beyond"), ("deep", "nested"), ("digits", "beyond 64 bits"),
                      ("inf", "out of range"), ("zero", "symbolic link"),
                      ("fifo", "a FIFO"), ("meta", "a FIFO")):
        t0 = time.monotonic()
        run = run_doctor(["analyze", str(top / name), "--report", str(tmp_path / "r.json")],
                         timeout=60)
        seconds = time.monotonic() - t0
        assert run.returncode == 2, (name, run.stderr[-2000:], run.stdout[-500:])
        assert why in run.stderr and len(run.stderr.strip().splitlines()) == 1, (name, run.stderr)
        assert "Traceback" not in run.stderr and "No problem found" not in run.stdout
        assert seconds < 20, (name, seconds)


def test_a_runs_folder_with_fifos_and_escapes_lists_and_prunes(tmp_path, capsys):
    """A run dir whose run.json and report.json are FIFOs, named with an escape sequence:
    `runs` lists it at once (no fact read from a FIFO), its name shown escaped, and
    pruning removes it without following anything."""
    from ddpdoctor.cli import main

    for name in ("20250101-000000-abcdef", "20250102-000000-abcdef"):
        run = tmp_path / "runs" / name
        (run / "traces").mkdir(parents=True)
        os.mkfifo(run / "run.json")
        os.mkfifo(run / "report.json")
    named = tmp_path / "runs" / "x\x1b]52;c;cHduZWQ=\x07"
    (named / "traces").mkdir(parents=True)
    t0 = time.monotonic()
    assert main(["runs", "list", str(tmp_path / "runs")]) == 0
    assert main(["runs", "prune", "--keep", "0", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert time.monotonic() - t0 < 10 and not _no_command(out) and "\\x1b]52" in out, out
    assert os.listdir(tmp_path / "runs") == [named.name]  # a named run dir is never pruned


def test_a_header_claiming_a_rank_that_never_existed_is_left_out(tmp_path):
    """Two real ranks' traces and one whose header claims rank 1,048,575 of a world of
    1,048,576 (and a group listing it): the job has 2 ranks, no finding names the
    invented one, and the report's problems say it was left out."""
    from ddpdoctor.report.build import build_report
    from ddpdoctor.trace import layout as L
    from ddpdoctor.trace.writer import TraceWriter

    traces = tmp_path / "run" / "traces"
    traces.mkdir(parents=True)
    (tmp_path / "run" / "run.json").write_text('{"command": ["train.py"]}')
    for rank, world in ((0, 2), (1, 2), (1_048_575, 1_048_576)):
        with mock.patch("os.getpid", return_value=1000 + rank % 7):
            w = TraceWriter(traces, "run", capacity=16)
        w.set_identity(rank, world, 0)
        w.meta("group", index=0, name="0", ranks=[0, 1, 1_048_575] if rank else [0, 1])
        h = w.append(int(L.RecordKind.COLLECTIVE), L.OP_CODES["all_reduce"], 1, 0, 0, 0, 1000,
                     0, 4, -1, 0, 0, -1, b"4|-|float32|train.py:3|")
        if rank == 0:
            w.set_end(h, 2000)
        w.set_state(L.RankState.EXITED)
        w.close()
    t0 = time.monotonic()
    report = build_report(tmp_path / "run", live=False)
    assert time.monotonic() - t0 < 10
    assert report["world_size"] == 2 and [r["rank"] for r in report["ranks"]] == [0, 1]
    named = {r for f in report["findings"] for r in f["ranks"]}
    assert named <= {0, 1}, report["findings"]
    assert "1048575" not in json.dumps(report["findings"])
    assert any("claims rank 1,048,575" in p for p in report["problems"]), report["problems"]


def _one_rank(folder: Path) -> None:
    from ddpdoctor.trace import layout as L
    from ddpdoctor.trace.writer import TraceWriter

    folder.mkdir()
    w = TraceWriter(folder, "run", capacity=16)
    w.set_identity(0, 1, 0)
    h = w.append(int(L.RecordKind.COLLECTIVE), L.OP_CODES["all_reduce"], 1, 0, 0, 0, 1000, 0,
                 4, -1, 0, 0, -1, b"4|-|float32|train.py:3|")
    w.set_end(h, 2000)
    w.close()


# -- the terminal -------------------------------------------------------------------------

def _hostile_report() -> dict:
    report = json.loads((Path(__file__).resolve().parents[1] / "fixtures" /
                         "report_hang_4ranks.json").read_text())
    report["command"] = ["train.py", HOSTILE]
    report["problems"] = [HOSTILE]
    report["ranks"][0]["host"] = HOSTILE
    report["ranks"][0]["current"]["callsite"] = f"train.py:3 {HOSTILE}"
    for f in report["findings"]:
        f.update(summary=HOSTILE, detail=f"line\n{HOSTILE}", fix=HOSTILE)
    return report


@needs_nobody
def test_no_hostile_byte_from_a_report_reaches_the_terminal(open_tmp):
    """A report.json another user wrote, holding OSC 52 clipboard writes, a screen clear,
    OSC 8 and markup hyperlinks, C1 controls, a bell and a bidirectional override in its
    command, problems, a host, a call site and every finding: `analyze` prints it to a
    terminal (colours on) with each shown escaped, none acted on."""
    _nobody("import sys; open(sys.argv[1], 'w').write(sys.stdin.read())",
            str(_shared_dir(open_tmp, "s") / "report.json"), stdin=json.dumps(_hostile_report()))
    run = run_doctor(["analyze", str(open_tmp / "s" / "report.json")], timeout=60,
                     env={"FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": "120"})
    assert run.returncode == 1, run.stderr[-2000:]
    assert "\x1b[" in run.stdout  # a terminal's output: colours on
    assert not _no_command(run.stdout + run.stderr), _no_command(run.stdout)
    assert "\\x1b]52;c;" in run.stdout and "\\x9b31m" in run.stdout  # shown, escaped


def test_no_hostile_byte_from_a_report_reaches_the_terminal_through_the_ui(tmp_path):
    """The same report in the UI: what it would write to the terminal for the whole screen,
    on the summary and on a rank's screen, holds none of those commands."""
    import asyncio

    path = tmp_path / "report.json"
    path.write_text(json.dumps(_hostile_report()))
    asyncio.run(_ui_screens(path))


async def _ui_screens(path: Path) -> None:
    from ddpdoctor.tui.app import make_app

    app = make_app(path)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        for key in ("f", "enter", None):
            screen = app.screen._compositor.render_update(full=True)
            text = screen.render_segments(app.console)
            assert not _no_command(text), _no_command(text)
            if key:
                await pilot.press(key)
                await pilot.pause()


@needs_nobody
def test_no_hostile_byte_from_linted_code_reaches_the_terminal(open_tmp):
    """A file another user named with an escape sequence, whose flagged line holds one in
    a comment: `lint` prints the finding with both escaped, and so does `run`'s notice."""
    from ddpdoctor.lint.prerun import lint_before_run
    from ddpdoctor.terminal_text import SafeConsole

    code = ("import torch.distributed as dist\nrank = dist.get_rank()\n"
            f"if rank == 0:  # {HOSTILE}\n    dist.barrier()  # {HOSTILE}\n")
    name = "train\x1b]0;pwned\x07.py"
    tmp_path = _shared_dir(open_tmp, "s")
    _nobody("import sys; open(sys.argv[1], 'w').write(sys.stdin.read())",
            str(tmp_path / name), stdin=code)
    run = run_doctor(["lint", str(tmp_path / name)], timeout=60)
    assert run.returncode == 1 and "rank_dependent_collective" in run.stdout, run.stdout
    assert not _no_command(run.stdout + run.stderr), _no_command(run.stdout)
    out = io.StringIO()
    (tmp_path / "run").mkdir()
    lint_before_run([str(tmp_path / name)], tmp_path / "run",
                    SafeConsole(file=out, force_terminal=True, width=120))
    assert "lint notice" in out.getvalue() and not _no_command(out.getvalue())


def test_notices_and_errors_reach_the_terminal_escaped(capsys):
    """A notice on stderr and a one-line error (a path the user gave, holding escapes)."""
    from ddpdoctor.cli import main
    from ddpdoctor.proc.signals import say_to_stderr

    say_to_stderr(f"ddpdoctor: {HOSTILE}")
    assert main(["analyze", f"/nonexistent/{HOSTILE}"]) == 2
    err = capsys.readouterr().err
    assert "\\x1b]52" in err and not _no_command(err), err


# -- the ranks' environment ---------------------------------------------------------------

def test_the_secret_never_reaches_the_ranks(tmp_path):
    """The nodes' secret in ddpdoctor's environment: the job's processes do not see it."""
    from ddpdoctor.config import RunConfig
    from ddpdoctor.launch.command import job_env

    os.environ["DDPDOCTOR_STORE_SECRET"] = SECRET
    try:
        assert "DDPDOCTOR_STORE_SECRET" not in job_env(tmp_path, "r", RunConfig(("x.py",)))
    finally:
        del os.environ["DDPDOCTOR_STORE_SECRET"]
    check = "import os, sys; sys.exit(3 if 'DDPDOCTOR_STORE_SECRET' in os.environ else 0)"
    run = run_doctor(["run", "--run-dir", str(tmp_path / "r"), "--", PYTHON, "-c", check],
                     env={"DDPDOCTOR_STORE_SECRET": SECRET}, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
