"""Security: no pickle, no listening socket, owner-only run dirs, secrets redacted, ring links
and the node store only for the job's own processes."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ddpdoctor.redact import REDACTED, is_secret_name, redact_argv, redact_mapping

from .helpers import (COLLECTIVES, JOBS, TRAIN, free_port, job_pids, rank_headers, read_report,
                      run_args, run_doctor, start_doctor, wait_until)

PACKAGE = Path(__file__).resolve().parents[2] / "ddpdoctor"


DESERIALISERS = {"pickle": {"load", "loads", "Unpickler"}, "cPickle": {"load", "loads"},
                 "dill": {"load", "loads"}, "cloudpickle": {"load", "loads"},
                 "marshal": {"load", "loads"}, "shelve": {"open"}, "joblib": {"load"},
                 "torch": {"load"}, "yaml": {"load", "unsafe_load"}}


def _deserialising(tree: ast.AST) -> list[int]:
    """The lines of ``tree`` that call (or import) a deserialiser that can run code: the
    code, not a string that names one (lint's tables of calls do)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.attr in DESERIALISERS.get(node.value.id, ()):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module in DESERIALISERS and \
                any(a.name in DESERIALISERS[node.module] for a in node.names):
            lines.append(node.lineno)
    return lines


def test_nothing_is_unpickled():
    """torch's own object collectives pickle (the user's business); ddpdoctor never
    deserialises with pickle (or its cousins) anything it reads."""
    hits = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(errors="replace")
        for n in _deserialising(ast.parse(text)):
            hits.append(f"{path.relative_to(PACKAGE.parent)}:{n}: "
                        f"{text.splitlines()[n - 1].strip()}")
    assert not hits, "deserialisation that can run code:\n" + "\n".join(hits)
    assert _deserialising(ast.parse("import pickle\npickle.loads(b'')")) == [2]
    assert _deserialising(ast.parse("CALLS = {'pickle.load', 'torch.load'}")) == []


# -- sockets ---------------------------------------------------------------------------

TCP_LISTEN = "0A"


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        m = re.fullmatch(r"socket:\[(\d+)\]", target)
        if m:
            inodes.add(int(m.group(1)))
    return inodes


def _sockets(pid: int) -> list[dict]:
    """The sockets process ``pid`` holds: inet (with local address and state) and unix
    (with path), from /proc/<pid>/net/* and /proc/<pid>/fd (no psutil)."""
    mine = _socket_inodes(pid)
    found = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if int(f[9]) in mine:
                found.append({"proto": proto, "local": f[1], "state": f[3]})
    try:
        lines = Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]
    except OSError:
        lines = []
    for line in lines:
        f = line.split()
        if int(f[6]) in mine:
            found.append({"proto": "unix", "flags": f[3], "path": f[7] if len(f) > 7 else ""})
    return found


def _loopback(local: str) -> bool:
    addr = local.split(":")[0]
    return addr in ("0100007F", "00000000000000000000000001000000")


@pytest.mark.slow
def test_supervisor_listens_on_no_socket(run_dir):
    proc = start_doctor([*run_args(run_dir, "--hang-timeout", "30"), str(TRAIN)],
                        env={"MODE": "long", "SECONDS": "20", "STEP_SLEEP": "0.05"})
    try:
        assert wait_until(lambda: len(rank_headers(run_dir)) == 2, 60)
        wait_until(lambda: (run_dir / "stacks").exists(), 5)
        sockets = _sockets(proc.pid)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    inet = [s for s in sockets if s["proto"] != "unix"]
    listening = [s for s in inet if s["state"] == TCP_LISTEN and not _loopback(s["local"])]
    assert not listening, f"ddpdoctor listens beyond loopback: {listening}"
    unix_listening = [s for s in sockets if s["proto"] == "unix" and s["flags"] == "00010000"
                      and not s["path"].startswith(str(run_dir))]
    assert not unix_listening, f"ddpdoctor listens on a unix socket: {unix_listening}"
    assert not inet, f"the supervisor opens no network socket at all, found {inet}"


# -- permissions -------------------------------------------------------------------------

@pytest.mark.slow
def test_run_dir_is_owner_only(run_dir):
    run = run_doctor([*run_args(run_dir, "--hang-timeout", "5"), str(COLLECTIVES)],
                     env={"BUG": "op"})  # a hang: stacks, report, supervisor log, traces
    assert run.returncode == 124, run.stderr[-2000:]
    assert (run_dir / "report.json").is_file() and any((run_dir / "stacks").iterdir())
    assert run_doctor(["analyze", str(run_dir)]).returncode == 1  # the mismatch: an error
    loose = []
    for path in [run_dir, *run_dir.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & 0o077:
            loose.append(f"{path.relative_to(run_dir.parent)} {oct(mode)}")
    assert not loose, "readable by others:\n" + "\n".join(loose)
    assert not job_pids(run_dir)


# -- redaction ---------------------------------------------------------------------------

SECRET_ARGS = ["--api-key=sk-abc123", "--hf-token", "hf_secretvalue", "--lr", "0.1",
               "--db-password=hunter2", "--max-tokens", "512", "--tokenizer", "gpt2",
               "--data", "https://user:pa55word@example.com/data"]
SECRET_VALUES = ["sk-abc123", "hf_secretvalue", "hunter2", "pa55word"]


def test_redact_argv():
    out = redact_argv(["train.py", *SECRET_ARGS, "HF_TOKEN=hf_x", "AWS_SECRET_ACCESS_KEY=q"])
    assert out == ["train.py", f"--api-key={REDACTED}", "--hf-token", REDACTED, "--lr", "0.1",
                   f"--db-password={REDACTED}", "--max-tokens", "512", "--tokenizer", "gpt2",
                   "--data", f"https://user:{REDACTED}@example.com/data",
                   f"HF_TOKEN={REDACTED}", f"AWS_SECRET_ACCESS_KEY={REDACTED}"]
    assert redact_argv(["--token", "--verbose"]) == ["--token", "--verbose"]


def test_redact_mapping():
    env = {"HF_TOKEN": "hf_x", "WANDB_API_KEY": "k", "PATH": "/bin", "MASTER_ADDR": "h",
           "nested": {"password": "p", "ok": 1}, "argv": ["--secret", "s"], "GH_TOKEN": ""}
    assert redact_mapping(env) == {
        "HF_TOKEN": REDACTED, "WANDB_API_KEY": REDACTED, "PATH": "/bin", "MASTER_ADDR": "h",
        "nested": {"password": REDACTED, "ok": 1}, "argv": ["--secret", REDACTED],
        "GH_TOKEN": ""}


@pytest.mark.parametrize("name,secret", [
    ("--api-key", True), ("HF_TOKEN", True), ("github_token", True), ("DB_PASSWORD", True),
    ("aws_secret_access_key", True), ("apiKey", True), ("--auth", True),
    ("--max-tokens", False), ("--tokenizer", False), ("--num-keys", False),
    ("MASTER_PORT", False), ("--monkey", False), ("--keyboard", False), ("--lr", False)])
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret


@pytest.mark.slow
def test_secrets_are_redacted_in_run_json_report_and_traces(run_dir):
    run = run_doctor([*run_args(run_dir, "--hang-timeout", "5"), str(COLLECTIVES),
                      *SECRET_ARGS], env={"HF_TOKEN": "hf_envsecret",
                                          "DDPDOCTOR_STORE_SECRET": "store-secret-value"})
    assert run.returncode == 0, run.stderr[-2000:]
    run_json = (run_dir / "run.json").read_text()
    report = read_report(run_dir / "report.json")
    for value in [*SECRET_VALUES, "hf_envsecret", "store-secret-value"]:
        assert value not in run_json, value
        for meta in (run_dir / "traces").glob("*.meta.jsonl"):
            assert value not in meta.read_text(), (meta.name, value)
    assert json.loads(run_json)["command"][-1] == f"https://user:{REDACTED}@example.com/data"
    leaked = [v for v in [*SECRET_VALUES, "hf_envsecret", "store-secret-value"]
              if v in json.dumps(report)]
    assert not leaked, f"report.json leaks {leaked}"
    assert report["command"][-1] == f"https://user:{REDACTED}@example.com/data"


# -- ring links --------------------------------------------------------------------------

RING_JOB = JOBS / "ring_job.py"
STRANGER = (JOBS / "ring_stranger.py").read_text()
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
RIGHT_LATE_S = "4"  # rank 0's link socket waits this long for rank 1: the strangers' window


def _stranger(pids: list[int], as_nobody: bool) -> subprocess.Popen:
    python = os.path.realpath(sys.executable)
    argv = [python, "-I", "-S", "-c", STRANGER, *map(str, pids)]
    return subprocess.Popen(NOBODY + argv if as_nobody else argv, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ring_run(run_dir: Path, strangers: bool) -> tuple[subprocess.CompletedProcess, float,
                                                       list[list[dict]]]:
    """The ring job under ddpdoctor (rank 1 late to the first all-reduce), with two
    strangers (another uid, and this uid but not a rank) connecting to its link sockets."""
    t0 = time.monotonic()
    proc = start_doctor([*run_args(run_dir, "--hang-timeout", "60"), str(RING_JOB)],
                        env={"RIGHT_LATE_S": RIGHT_LATE_S})
    spies = []
    try:
        if strangers:
            assert wait_until(lambda: len(rank_headers(run_dir)) == 2, 120)
            pids = [h.pid for h in rank_headers(run_dir).values()]
            spies = [_stranger(pids, True), _stranger(pids, False)]
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        seen = [json.loads(spy.communicate(input="", timeout=60)[0] or "[]") for spy in spies]
    seconds = time.monotonic() - t0
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), seconds, seen


def _first_ring_call_s(report: dict, rank: int) -> float:
    first = next(e for e in report["timeline"][str(rank)] if e["op"] == "all_reduce")
    return first["end"] - first["start"]


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="another user's process needs root and setpriv")
def test_a_stranger_cannot_use_a_ring_link_and_changes_nothing(tmp_path):
    """Another uid floods the ranks' link sockets (32 connections each, more than their
    backlog) and a process of this uid that is not the neighbour connects first: the other
    uid cannot even connect (the socket sits in a directory only the ranks' user enters) nor
    open the ranks' memory, the same-uid one is refused (no descriptor, no byte), and the
    job ends as without them: same output and exit, shared memory still (no fallback to
    gloo), the real neighbour not made to wait."""
    plain, plain_s, _ = _ring_run(tmp_path / "plain", strangers=False)
    spied, spied_s, seen = _ring_run(tmp_path / "spied", strangers=True)
    assert plain.returncode == 0 and spied.returncode == 0, spied.stderr[-2000:]
    report = read_report(tmp_path / "spied" / "report.json")
    alone = read_report(tmp_path / "plain" / "report.json")
    print(f"ring job: {plain_s:.1f} s alone, {spied_s:.1f} s with two strangers; rank 1's "
          f"first ring call {_first_ring_call_s(alone, 1):.3f} s alone, "
          f"{_first_ring_call_s(report, 1):.3f} s with them")
    checksum = [line for line in plain.stdout.splitlines() if line.startswith("checksum")]
    assert checksum and checksum == [line for line in spied.stdout.splitlines()
                                     if line.startswith("checksum")]
    nobody, same_uid = seen
    assert nobody and same_uid, "the strangers never saw a link socket"
    for entry in nobody + same_uid:
        assert entry.get("got_fds", 0) == 0 and entry.get("got_bytes", 0) == 0, entry
    assert all(not e["connected"] and not e["flood_connected"] for e in nobody), nobody
    assert all(e["memory"].startswith("denied") for e in nobody), nobody
    transports = report["transports"]
    assert {t["transport"] for t in transports} == {"shm"}, transports
    refused = [r for t in transports for r in t["refused"]]
    assert not any(r.endswith("uid 65534") for r in refused), refused
    assert any(r.endswith(f"uid {os.getuid()}") for r in refused), refused
    assert _first_ring_call_s(report, 1) < 5.0  # the link's timeout is 10 s
    assert _first_ring_call_s(alone, 1) < 5.0
    # removed once linked: none of this job's ranks left its socket directory (other
    # workers of the suite run ring jobs of their own at the same time)
    ours = {f"ddpdoctor-ring-{r['pid']:x}-" for r in (*report["ranks"], *alone["ranks"])}
    assert ours and not [p for p in Path(tempfile.gettempdir()).glob("ddpdoctor-ring-*")
                         if any(p.name.startswith(prefix) for prefix in ours)]


def test_a_group_that_fell_back_gives_the_first_hand_reason():
    """The rank that could not link says why; the ranks that only heard of it join its
    entry, so the report gives one reason, the true one."""
    from ddpdoctor.report.transports import _first_hand

    entries = [{"group": "0", "transport": "gloo", "why": "another rank of the group could "
                "not link", "ranks": [0, 2], "refused": []},
               {"group": "0", "transport": "gloo", "why": "link refused: timeout (the "
                "neighbour never connected)", "ranks": [1], "refused": ["pid 9 uid 0"]},
               {"group": "1", "transport": "gloo", "why": "another rank of the group could "
                "not map", "ranks": [3], "refused": []}]
    assert _first_hand(entries) == [
        {"group": "0", "transport": "gloo", "why": "link refused: timeout (the neighbour "
         "never connected)", "ranks": [0, 1, 2], "refused": ["pid 9 uid 0"]},
        entries[2]]


# -- the nodes' channel ------------------------------------------------------------------

STORE_SECRET = "the-secret-of-this-two-node-job"
OTHER_SECRET = "a-secret-of-some-other-job-entirely"
NODE_STRANGER = JOBS / "node_stranger.py"
AS_NOBODY = os.geteuid() == 0 and shutil.which("setpriv") is not None


def _until(what, timeout: float = 15.0) -> bool:
    return wait_until(what, timeout, 0.05)


def _node_stranger(port: int, *mode: str) -> subprocess.Popen:
    """node_stranger.py against ``port``, as another uid when this test can (root)."""
    argv = [os.path.realpath(sys.executable), "-I", "-S", str(NODE_STRANGER), str(port), *mode]
    return subprocess.Popen(NOBODY + argv if AS_NOBODY else argv, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _only_challenges(got: list[str]) -> list[bytes]:
    """What node 0 sent a stranger that is not its challenge."""
    from ddpdoctor.supervisor.node_auth import CHALLENGE, NONCE_BYTES

    extra = []
    for text in got:
        data = bytes.fromhex(text)
        while data:
            size = int.from_bytes(data[:4], "big")
            body, data = data[4:4 + size], data[4 + size:]
            if not (body.startswith(CHALLENGE) and size == len(CHALLENGE) + NONCE_BYTES):
                extra.append(body[:64])
    return extra


@pytest.fixture
def two_supervisors(tmp_path):
    """Node 0's link and node 1's, over the real channel on loopback, with the secret; what
    each logs is kept."""
    from ddpdoctor.supervisor.node_auth import channel_key
    from ddpdoctor.supervisor.node_follower import NodeFollower
    from ddpdoctor.supervisor.node_leader import NodeLeader
    from ddpdoctor.supervisor.node_store import NodeSetup, open_hub

    setup = NodeSetup("127.0.0.1", free_port(), 2, None)
    logs: list[tuple[str, dict]] = []
    log = lambda event, **fields: logs.append((event, fields))  # noqa: E731
    dropped = lambda key, why, count: log("store_refused", key=key, why=why)  # noqa: E731
    leader = NodeLeader(lambda: open_hub(setup, channel_key(STORE_SECRET), dropped),
                        lambda attempt: tmp_path / "node0", lambda *a: None, log, 30.0,
                        expected=1)
    leader.start()
    node1 = tmp_path / "node1"
    (node1 / "traces").mkdir(parents=True)
    follower = NodeFollower(setup, "1", lambda: (0, node1), 30.0, STORE_SECRET, log)
    follower.start()
    assert _until(lambda: "1" in leader.nodes and follower.linked and
                  leader.nodes["1"].host != "")
    yield setup, leader, follower, logs
    follower.close()
    leader.close()


def _refusals(logs, why: str) -> list[dict]:
    return [f for e, f in logs if e == "store_refused" and why in f["why"]]


def _state(leader, follower) -> tuple:
    view = leader.nodes["1"]
    return (sorted(leader.nodes), view.lost, view.done, view.exit_code, follower.verdict,
            follower.final, follower.asks, follower.linked)


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_strangers_without_the_secret_read_nothing_and_change_nothing(two_supervisors):
    """Another uid, without the secret, sends junk, a 2 GiB length, a forged verdict and a
    node's report without the challenge, a wrong answer to the challenge, and holds 400
    connections writing junk: node 0 sends it its challenge and nothing else, node 1 is
    neither stopped nor lost, nothing it said reaches node 0, and node 0's memory stays
    bounded; the real nodes still talk."""
    setup, leader, follower, logs = two_supervisors
    before, rss = _state(leader, follower), _rss_kb()
    stranger = _node_stranger(setup.port, "flood")
    time.sleep(4.0)
    out, err = stranger.communicate(input="", timeout=120)
    seen = json.loads(out or "{}")
    grown_mb = (_rss_kb() - rss) / 1024
    print(f"stranger: {seen.get('rounds')} rounds, {seen.get('held')} held connections; "
          f"node 0 refused {leader.hub.refused_connections}; its memory grew {grown_mb:.1f} MB")
    assert seen.get("rounds", 0) > 0 and seen.get("held", 0) > 0, err[-2000:]
    assert not _only_challenges(seen["got"]), _only_challenges(seen["got"])[:5]
    assert leader.hub.refused_connections > 0
    assert _state(leader, follower) == before
    assert not leader.hub.dropped  # nothing it sent was even read as a message
    assert grown_mb < 64
    n = leader.request_stacks([3])  # the real node 0 still reaches node 1
    assert _until(lambda: bool(follower.asks)) and follower.asks == [(n, [3])]


def _raw_node(setup, secret: str, timeout: float = 10.0):
    """A client that passed the channel's handshake (with ``secret``): a peer that holds
    the secret, on a connection of its own."""
    from ddpdoctor.supervisor.node_auth import channel_key
    from ddpdoctor.supervisor.node_link import connect

    return connect(setup.host, setup.port, channel_key(secret), timeout)


def test_a_wrong_secret_is_refused_at_the_door(two_supervisors):
    from ddpdoctor.supervisor.node_link import Unproven

    setup, leader, follower, logs = two_supervisors
    with pytest.raises(Unproven, match="does not prove this job's secret"):
        _raw_node(setup, OTHER_SECRET, 2.0)
    assert sorted(leader.nodes) == ["1"] and not leader.hub.dropped


def test_forged_or_replayed_messages_change_nothing(two_supervisors):
    """A peer that holds the secret, on a connection of its own: a frame sealed in another
    session, its own frame sent again (a replay), a report before its hello, and a hello
    that names node 1 (joined already): each is refused and logged; node 1 stays node 1,
    and node 0's verdict still reaches it."""
    from ddpdoctor.supervisor.node_auth import Session, body_of

    setup, leader, follower, logs = two_supervisors
    before = _state(leader, follower)
    link = _raw_node(setup, STORE_SECRET)
    done = {"t": time.time_ns(), "done": True, "exit_code": 9}
    link.link.queue(Session(b"k" * 32, leader=False).seal("report", done))  # another session
    link.send("report", done)  # before any hello
    frame = link.session.seal_body(body_of("hello", {"node": "1"}))
    link.link.queue(frame)
    link.link.queue(frame)  # the same frame again: a replay
    link.link.flush(time.monotonic())
    assert _until(lambda: len(_refusals(logs, "")) >= 4)
    for why in ("bad seal", "not yet joined", "already joined", "out of order"):
        assert _refusals(logs, why), (why, logs)
    assert leader._peers["1"] is not None and not leader._peers["1"].closed  # still node 1's
    leader.publish_verdict("hang", "the real one", False, 0)
    assert _until(lambda: follower.verdict is not None)
    assert follower.verdict["message"] == "the real one" and not follower.verdict["stop"]
    after = _state(leader, follower)
    assert after[:4] == before[:4] and after[-1]
    link.close()


def test_the_channel_listens_on_its_own_address_only():
    from ddpdoctor.supervisor.node_auth import channel_key
    from ddpdoctor.supervisor.node_store import NodeSetup, open_hub

    port = free_port()
    hub = open_hub(NodeSetup("127.0.0.1", port, 2, 0), channel_key(STORE_SECRET),
                   lambda *a: None)
    try:
        listening = [line.split()[1] for line in
                     Path("/proc/net/tcp").read_text().splitlines()[1:] +
                     Path("/proc/net/tcp6").read_text().splitlines()[1:]
                     if line.split()[3] == TCP_LISTEN and
                     line.split()[1].endswith(f":{port:04X}")]
    finally:
        hub.close()
    assert listening == [f"0100007F:{port:04X}"], listening


def test_a_secret_file_must_be_the_users_own(tmp_path):
    from ddpdoctor.errors import UserError
    from ddpdoctor.supervisor.node_secret import INSECURE_KEY, node_secret

    good = tmp_path / "secret"
    good.write_text("0123456789abcdef0123456789abcdef\n")
    good.chmod(0o600)
    assert node_secret(good, False).value == "0123456789abcdef0123456789abcdef"
    link = tmp_path / "link"
    link.symlink_to(good)
    good_but_open = tmp_path / "open"
    good_but_open.write_text("0123456789abcdef0123456789abcdef")
    good_but_open.chmod(0o640)
    for path in (link, good_but_open, tmp_path):
        with pytest.raises(UserError):
            node_secret(path, False)
    if AS_NOBODY:
        os.chown(good, 65534, 65534)
        with pytest.raises(UserError, match="belongs to uid 65534"):
            node_secret(good, False)
    assert node_secret(None, True).value == INSECURE_KEY


def test_mirrored_files_are_bounded(tmp_path):
    """Even sealed, a copy cannot make a mirror bigger than a real rank's trace or put a
    file at any offset; node 0 keeps a bounded list of such problems."""
    from ddpdoctor.supervisor.node_leader import MAX_PROBLEMS, NodeLeader
    from ddpdoctor.supervisor.node_messages import NodeReport
    from ddpdoctor.trace import layout as L
    from ddpdoctor.trace.sync import apply_delta

    head = base64_of(L.MAGIC + b"\0" * 64)
    huge = {"rings": [{"name": "traces/pid-1.ring", "capacity": 1 << 24, "header": head,
                       "records": []}],
            "files": [{"name": "traces/pid-1.meta.jsonl", "offset": 1 << 40, "data": "e30K"}]}
    problems = apply_delta(tmp_path / "m", huge)
    assert len(problems) == 2 and not list((tmp_path / "m" / "traces").iterdir()), problems
    leader = NodeLeader(lambda: None, lambda a: tmp_path / "n0", lambda *a: None,
                        lambda *a, **k: None, 30.0)
    from ddpdoctor.supervisor.node_leader import NodeView

    view = NodeView("1")
    for _ in range(100):
        leader._take(view, NodeReport.parse({"delta": huge, "host": "h"}))
    assert len(leader.problems) == MAX_PROBLEMS and "more problem" in leader.problems[-1]


def base64_of(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def _supervisor_events(run_dir: Path, event: str) -> list[dict]:
    lines = (run_dir / "supervisor.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e.get("event") == event]


@pytest.mark.slow
def test_a_stranger_cannot_stop_or_starve_a_two_node_job(tmp_path):
    """While a healthy two-node job runs, another uid without the secret keeps sending
    forged verdicts and reports and holds hundreds of connections: the job ends as without
    it (both nodes 0, one report on node 0, completed, no error, no lost node)."""
    from tests.integration.test_multinode import _errors, _finish, _report, _start_nodes

    store = free_port()
    procs = _start_nodes(tmp_path, {"BUG": "none"}, store=store)
    stranger = _node_stranger(store, "flood")
    try:
        results = _finish(procs)
    finally:
        out, err = stranger.communicate(input="", timeout=120)
    seen = json.loads(out or "{}")
    assert seen.get("rounds", 0) > 0, err[-2000:]
    assert not _only_challenges(seen["got"])
    for node, (code, _out, node_err) in enumerate(results):
        assert code == 0, f"node {node}: {node_err[-3000:]}"
    assert not (tmp_path / "node1" / "report.json").exists()
    report = _report(tmp_path)
    assert report["outcome"] == "completed" and not _errors(report)
    assert report["world_size"] == 4 and len(report["ranks"]) == 4
    assert not [n for n in report["nodes"] if n["lost"]]
    assert not _supervisor_events(tmp_path / "node0", "node_lost")


def test_a_big_copy_goes_in_messages_the_channel_takes():
    """A node's copy bigger than one message of the channel (8 MiB) goes in several, each
    sealed under the limit, in order."""
    from ddpdoctor.supervisor.node_auth import Session
    from ddpdoctor.supervisor.node_frames import MAX_MESSAGE_BYTES
    from ddpdoctor.trace.sync import split_delta

    files = [{"name": f"stacks/pid-{i}.json", "data": "A" * (3 << 20)} for i in range(5)]
    parts = split_delta({"rings": [], "files": files}, MAX_MESSAGE_BYTES // 2)
    assert [f for p in parts for f in p["files"]] == files and len(parts) == 5
    session = Session(b"k" * 32, leader=False)
    assert all(len(session.seal("report", {"delta": p})) < MAX_MESSAGE_BYTES for p in parts)


# -- untrusted text ------------------------------------------------------------------------

PWNED = "/tmp/ddpdoctor-pwned-by-a-call-site"
HOSTILE_SITE = f"x.py:1\nimport os; os.system('touch {PWNED}')"


def _hostile_run_dir(run_dir: Path) -> None:
    """A one-rank run dir whose trace and run.json say hostile things: call sites, a
    framework site, a group name, a loader-less command with line breaks, quotes and
    backslashes, and a terminal escape."""
    from ddpdoctor.trace import layout as L
    from ddpdoctor.trace.writer import TraceWriter

    (run_dir / "traces").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({
        "command": ["train.py", '"""\nimport os\n"""', "\\", "\x1b[2J"],
        "started_at": "now\nimport os", "hang_timeout": 5}))
    w = TraceWriter(run_dir / "traces", "run-1", capacity=64)
    w.set_identity(0, 1, 0)
    w.meta("group", index=0, name="0\nimport os", ranks=[0])
    sites = [HOSTILE_SITE, f"x.py:2\r\n'''\"\"\"\\\nos.system('touch {PWNED}')",
             "x.py:3\u2028os.system('true')\x1b]0;title\x07"]
    for i, site in enumerate(sites):
        text = f"4|-|float32|{site}|torch/x.py:9\nimport sys".encode()
        h = w.append(int(L.RecordKind.COLLECTIVE), L.OP_CODES["all_reduce"], 1, 0, 0, i,
                     1000 + i, 0, 4, -1, 0, 0, -1, text[:L.TEXT_SIZE])
        w.set_end(h, 2000 + i)
    w.set_state(L.RankState.EXITED)
    w.set_exit_code(0)
    w.meta("exit")
    w.close()


def test_trace_text_is_read_as_text(tmp_path):
    from ddpdoctor.trace.reader import read_trace

    _hostile_run_dir(tmp_path)
    [ring] = (tmp_path / "traces").glob("*.ring")
    trace = read_trace(ring)
    sites = [r.callsite for r in trace.records]
    assert sites and sites[0].startswith("x.py:1\\nimport os")
    for record in trace.records:
        for text in (record.callsite, record.framework_site):
            assert text.isprintable(), repr(text)
    assert trace.group_names()[0] == "0\\nimport os"


def test_a_repro_of_hostile_call_sites_runs_only_the_replay(tmp_path):
    """Call sites that hold a line break and a statement, quotes, backslashes, a line
    separator and terminal escapes: the repro parses, holds no such statement (no import
    beyond its own, no call of os.system), and running it creates nothing."""
    import ast

    from ddpdoctor.repro.command import write_repro

    if os.path.exists(PWNED):
        os.unlink(PWNED)
    _hostile_run_dir(tmp_path / "run")
    script = write_repro(tmp_path / "run", tmp_path / "repro.py")
    text = script.read_text()
    tree = ast.parse(text)
    imports = sorted(a.name for node in ast.walk(tree)
                     if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names)
    assert "sys" not in imports and "system" not in [
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)], imports
    assert not any(line.lstrip().startswith(("import os;", "os.system"))
                   for line in text.splitlines())
    assert "\x1b" not in text and "\u2028" not in text and "\r" not in text
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env.pop("DDPDOCTOR_RUN_DIR", None)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    # torch 2.13's gloo now and then aborts a process at teardown after its work is done
    # (test_sample_bugs.teardown_abort_only): not what this test is about
    gloo_teardown = done.returncode == -6 and \
        done.stderr.strip() == "terminate called without an active exception"
    assert done.returncode == 0 or gloo_teardown, done.stderr[-3000:]
    assert not os.path.exists(PWNED)


# -- run dirs --------------------------------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="another user's directory needs root")
def test_a_run_dir_prepared_by_someone_else_is_refused(tmp_path):
    """Another user's directory, and a directory of this user that others can write (with
    a link planted in it toward a root-only file): one line, exit 2, nothing written, the
    file intact."""
    victim = tmp_path / "victim"
    victim.write_text("root's own\n")
    victim.chmod(0o600)
    theirs, shared = tmp_path / "theirs", tmp_path / "shared"
    for d in (theirs, shared):
        d.mkdir()
        d.chmod(0o777)
    os.chown(theirs, 65534, 65534)
    (shared / "run.json").symlink_to(victim)
    (shared / ".run.json.tmp").symlink_to(victim)
    for d, why in ((theirs, "belongs to uid 65534"), (shared, "can be written by others")):
        run = run_doctor([*run_args(d), str(TRAIN)])
        assert run.returncode == 2 and why in run.stderr, run.stderr[-2000:]
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert not (d / "traces").exists()
    assert victim.read_text() == "root's own\n"


def test_a_link_at_a_temporary_name_is_replaced_not_followed(tmp_path):
    from ddpdoctor.rundir.layout import write_json_atomic

    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "run" / f".report.json.{os.getpid()}.tmp").symlink_to(victim)
    write_json_atomic(tmp_path / "run" / "report.json", {"ok": True})
    assert victim.read_text() == "keep\n"
    assert json.loads((tmp_path / "run" / "report.json").read_text()) == {"ok": True}
