"""The link between node 0's supervisor and another node's, over the real nodes' channel in one
process: copies, stack requests, the verdict, the final word, a lost node, no node 0."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from ddpdoctor.rundir.nodes import node_dir, read_node_file
from ddpdoctor.supervisor import node_follower
from ddpdoctor.supervisor.node_follower import NodeFollower
from ddpdoctor.supervisor.node_leader import NodeLeader
from ddpdoctor.config import parse_store
from ddpdoctor.errors import UserError
from ddpdoctor.supervisor.node_auth import LeaderHandshake, channel_key
from ddpdoctor.supervisor.node_channel import Hub
from ddpdoctor.supervisor.node_link import handshake
from ddpdoctor.supervisor.node_store import NodeSetup, node_setup, open_hub
from ddpdoctor.trace.reader import read_trace
from tests.integration.jobs.ports import free_port
from tests.unit.test_nodes import _write_trace


SECRET = "a-secret-of-this-test-job"


def _host(setup: NodeSetup, timeout: float) -> Hub:
    """Node 0's end of the channel, with the test's secret."""
    return open_hub(setup, channel_key(SECRET), lambda *a: None)


def _follower(setup: NodeSetup, node: str, run_dir, lost_after: float) -> NodeFollower:
    return NodeFollower(setup, node, run_dir, lost_after, SECRET, lambda *a, **k: None)



def _until(what, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_node_setup_from_the_command():
    argv = ["torchrun", "--nnodes", "2", "--node-rank=1", "--rdzv-endpoint", "h0:29400",
            "--nproc-per-node", "2", "train.py", "--nnodes", "9"]
    setup = node_setup(argv, None)
    assert setup == NodeSetup("h0", 29401, 2, 1, 2) and setup.leader is False
    elastic = node_setup(["torchrun", "--nnodes", "1:2", "t.py"], None)
    assert (elastic.nnodes, elastic.min_nodes, elastic.port) == (2, 1, 29501)
    assert node_setup(["torchrun", "--nnodes", "1", "t.py"], None) is None
    assert node_setup(["python", "t.py"], None) is None
    assert node_setup(argv, "store:1234").address == "store:1234"
    with pytest.raises(UserError):
        parse_store("nohost")


def test_copies_stacks_verdict_and_final_word(tmp_path):
    setup = NodeSetup("127.0.0.1", free_port(), 2, None)
    said: list[str] = []
    leader = NodeLeader(lambda: _host(setup, 10),  # opened in its thread
                        lambda attempt: tmp_path / "node0",
                        lambda text, style="": said.append(text), lambda *a, **k: None, 1.5,
                        expected=1)
    leader.start()
    node1 = tmp_path / "node1"
    (node1 / "traces").mkdir(parents=True)
    (node1 / "stacks").mkdir()
    w = _write_trace(node1 / "traces", 3)
    follower = _follower(setup, "1", lambda: (0, node1), 5.0)
    follower.start()
    mirror = node_dir(tmp_path / "node0", "1")
    assert _until(lambda: (mirror / "traces" / w.ring_path.name).exists())
    assert _until(lambda: len(read_trace(mirror / "traces" / w.ring_path.name).records) == 3)
    assert read_node_file(mirror)["host"] and follower.linked
    n = leader.request_stacks([2])
    assert _until(lambda: bool(follower.asks)) and follower.asks[0] == (n, [2])
    (node1 / "stacks" / "pid-7.json").write_text('{"frames": []}')
    follower.answered(follower.asks.pop(0)[0])
    assert leader.wait_acks(n, 5.0) == []
    assert (mirror / "stacks" / "pid-7.json").exists()  # copied before the answer came
    leader.publish_verdict("hang", "rank 2 waits", True, 124)
    assert _until(lambda: follower.verdict is not None) and follower.verdict["stop"]
    leader.publish_final("/r/report.json", "hung", "h0")
    assert follower.finish(124, 5.0)["report"] == "/r/report.json"
    assert leader.wait_done(5.0) == []  # its last copy arrived
    follower.close()
    leader.close()


def test_a_silent_node_is_lost(tmp_path):
    setup = NodeSetup("127.0.0.1", free_port(), 2, None)
    said: list[str] = []
    store = _host(setup, 10)
    leader = NodeLeader(lambda: store, lambda attempt: tmp_path,
                        lambda text, style="": said.append(text), lambda *a, **k: None, 1.0)
    leader.start()
    (tmp_path / "n1" / "traces").mkdir(parents=True)
    follower = _follower(setup, "1", lambda: (0, tmp_path / "n1"), 5.0)
    follower.start()
    assert _until(lambda: "1" in leader.nodes and leader.nodes["1"].host != "")
    follower.close()  # its supervisor is gone
    assert _until(lambda: leader.nodes["1"].lost, 5.0)
    assert read_node_file(node_dir(tmp_path, "1"))["lost"] is True
    assert any("lost contact with node 1" in s for s in said)
    assert leader.members() == ["0"]
    leader.close()


def test_a_node_that_took_longer_than_the_grace_to_reach_node_0_stays_joined(tmp_path):
    """Node 0 comes up (or a relay lets the connection through) after more than a grace of
    silence: the node joins, its copies arrive, and neither end takes the other for lost."""
    setup = NodeSetup("127.0.0.1", free_port(), 2, None)
    (tmp_path / "n1" / "traces").mkdir(parents=True)
    w = _write_trace(tmp_path / "n1" / "traces", 2)
    follower = _follower(setup, "1", lambda: (0, tmp_path / "n1"), 1.0)
    follower.start()  # dials a node 0 not listening yet
    time.sleep(2.0)  # twice the grace
    leader = NodeLeader(lambda: _host(setup, 10), lambda attempt: tmp_path / "node0",
                        lambda *a, **k: None, lambda *a, **k: None, 1.0, expected=1)
    leader.start()
    assert _until(lambda: "1" in leader.nodes)
    ring = node_dir(tmp_path / "node0", "1") / "traces" / w.ring_path.name
    assert _until(lambda: ring.exists() and len(read_trace(ring).records) == 2)
    time.sleep(2.5)  # past the grace on both ends, beats and copies flowing
    assert follower.failed is None and follower.linked
    assert not leader.nodes["1"].lost and leader.members() == ["0", "1"]
    follower.close()
    leader.close()


def test_a_frame_read_with_node_0s_proof_is_not_lost():
    """Node 0's first beat, in the same read as its proof (a node slow to read, a relay
    that passes both at once), is the session's first frame: kept, opened in order."""
    key = channel_key(SECRET)
    ours, theirs = socket.socketpair()

    def frames(*items: bytes) -> bytes:
        return b"".join(len(f).to_bytes(4, "big") + f for f in items)

    def node_0() -> None:
        hs = LeaderHandshake(key)
        theirs.sendall(frames(hs.challenge()))
        proof, session = hs.answer(theirs.recv(4096)[4:])
        theirs.sendall(frames(proof, session.seal("beat", {"n": 1}),
                              session.seal("beat", {"n": 2})))  # in one write

    peer = threading.Thread(target=node_0)
    peer.start()
    link = handshake(ours, key, 5.0)
    peer.join()
    got = []
    assert _until(lambda: got.extend(link.receive(0.1)) or len(got) >= 2, 5.0)
    assert [link.open(f) for f in got] == [("beat", {"n": 1}), ("beat", {"n": 2})]
    link.close()
    theirs.close()


def test_no_node_0_means_deciding_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(node_follower, "CONNECT_S", 1.0)
    setup = NodeSetup("127.0.0.1", free_port(), 2, 1)  # nobody listens there
    follower = _follower(setup, "1", lambda: (0, tmp_path), 5.0)
    follower.start()
    assert _until(lambda: not follower.linked, 15.0)
    assert "cannot reach node 0 at 127.0.0.1:" in (follower.failed or "")


def test_a_taken_port_cannot_be_hosted_twice():
    setup = NodeSetup("127.0.0.1", free_port(), 2, 0)
    first = _host(setup, 5)
    with pytest.raises(Exception):
        _host(setup, 5)
    leader = NodeLeader(lambda: _host(setup, 5), lambda a: Path("/nonexistent"),
                        lambda *a: None, lambda *a, **k: None, 1.0)
    leader.start()
    assert _until(lambda: leader.failed is not None, 10.0)  # said, not raised
    first.close()


def test_node_0_gone_after_its_final_word_still_decided(tmp_path):
    """Node 0 closes the channel once a node read its final word: the node, still stopping
    its ranks, takes that word (it writes no report of its own)."""
    setup = NodeSetup("127.0.0.1", free_port(), 2, None)
    leader = NodeLeader(lambda: _host(setup, 10), lambda attempt: tmp_path / "node0",
                        lambda *a: None, lambda *a, **k: None, 5.0, expected=1)
    leader.start()
    (tmp_path / "n1" / "traces").mkdir(parents=True)
    follower = _follower(setup, "1", lambda: (0, tmp_path / "n1"), 5.0)
    follower.start()
    assert _until(lambda: "1" in leader.nodes)
    leader.publish_final("/r/report.json", "hung", "h0")  # returns once node 1 read it
    leader.close()
    assert _until(lambda: follower.failed is not None)  # the channel closed
    assert follower.linked and follower.finish(124, 5.0)["report"] == "/r/report.json"
    follower.close()
