"""Node 0's side of a many-node job: mirror the other nodes, measure their clocks, decide.

A thread takes each node's messages from the nodes' channel (node_channel.Hub: only peers
that proved the secret, each within its quota) into RUN_DIR/nodes/<node>/ (a run dir of the
same layout, so the one causal model reads the whole job), estimates each node's clock
skew from its messages' stamps, and marks a node lost when it stops sending.  The
supervisor asks it for stacks, and publishes the verdict and the report through it.  Only
sealed messages count; what they say is parsed field by field (node_messages), and the
problems kept are capped.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ddpdoctor.analysis.model import JobView
from ddpdoctor.rundir.layout import write_json_atomic
from ddpdoctor.rundir.nodes import NODE_FILE, node_dir
from ddpdoctor.supervisor.node_channel import Hub, Peer, Received
from ddpdoctor.supervisor.node_messages import NodeReport, RankProgress, node_name
from ddpdoctor.trace.sync import apply_delta
from ddpdoctor.rundir.safe_path import make_dirs

TICK_S = 0.1
BEAT_S = 1.0  # node 0's beat to every node (a node silent for lost_after_s is lost)
PUSH_EVERY_S = 0.25  # how often a node sends its news, with few nodes
MESSAGES_PER_S = 1024.0  # with many: node 0 asks each for less (1,024 nodes: every 1 s)
SKEW_CHANGE_NS = 50_000_000  # node.json is rewritten when the skew estimate moves this much
MAX_PROBLEMS = 50  # problems kept from the other nodes' copies (then one line says more)


@dataclass
class NodeView:
    """What node 0 knows of one other node."""

    node: str
    host: str = ""
    skew_ns: int | None = None  # its clock minus node 0's (max of sent - received)
    written_skew: int | None = None
    last_seen: float = field(default_factory=time.monotonic)
    lost: bool = False
    lost_at_ns: int | None = None
    acked: int = 0  # the newest stack request it answered
    done: bool = False  # its job ended and its last copy arrived
    exit_code: int | None = None
    attempt: int = 0
    progress: dict[str, RankProgress] = field(default_factory=dict)
    ranks: set[int] = field(default_factory=set)
    read_final: bool = False  # it read node 0's final word
    mirror: Path | None = None  # its mirror dir in the attempt's run dir, once written
    mirror_attempt: int = -1


class NodeLeader:
    """The link of node 0's supervisor to the other nodes (a daemon thread)."""

    def __init__(self, open_hub: Callable[[], Hub],
                 run_dir_of: Callable[[int], Path], say: Callable[[str, str], None],
                 log: Callable[..., None], lost_after_s: float, expected: int = 0):
        self._open = open_hub  # called in the thread: the supervisor does not wait
        self.hub: Hub = None  # type: ignore[assignment]  # set once listening
        self.failed: str | None = None  # why the channel could not be opened
        self.expected = expected  # other nodes the job needs (--nnodes N: N - 1)
        self.run_dir_of = run_dir_of  # attempt -> the run dir its mirrors go into
        self.say = say
        self.log = log
        self.lost_after_s = lost_after_s
        self.nodes: dict[str, NodeView] = {}
        self.problems: list[str] = []
        self._problems_cut = 0
        self._peers: dict[str, Peer] = {}  # node -> its connection
        self._kept: dict[str, Any] = {}  # verdict, final: sent to every node, late ones too
        self._outbox: deque[tuple[str, Any]] = deque()  # sent by the thread
        self._asked = 0
        self._beat_at = 0.0
        self._chores_at = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ddpdoctor-nodes", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)

    # -- the thread ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self.hub = self._open()
        except Exception as e:  # noqa: BLE001 - the port is taken, or no network
            self.failed = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
            return
        try:
            while not self._stop.is_set():
                try:
                    self.tick()
                except Exception as e:  # noqa: BLE001 - a channel hiccup: said, go on
                    if len(self.problems) < 5:
                        self.problem(f"node link: {type(e).__name__}: {e}")
                    self._stop.wait(TICK_S)
        finally:
            self._flush()
            self.hub.close()

    def problem(self, text: str) -> None:
        """Keep a problem for the report, at most MAX_PROBLEMS of them."""
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)
            return
        self._problems_cut += 1
        more = f"... and {self._problems_cut} more problem(s) with the other nodes' copies"
        self.problems[-1] = more

    def tick(self) -> None:
        """Take the nodes' messages; every TICK_S: greet newcomers, send what is due,
        notice lost nodes (the work over every node, done once per tick, not per message)."""
        hub = self.hub
        now = time.monotonic()
        if now >= self._chores_at:
            self._chores_at = now + TICK_S
            self._chores(now)
        for peer, msg in hub.receive(TICK_S):
            self._on_message(peer, msg)
        self._flush()

    def _chores(self, now: float) -> None:
        hub = self.hub
        hub.refill()
        new = hub.adopt()
        if new:
            hub.broadcast(new, "beat", self._beat())  # how often to send, before hello
        if now - self._beat_at >= BEAT_S:
            self._beat_at = now
            self._broadcast("beat", self._beat())
        for view in list(self.nodes.values()):
            if not view.lost and not view.done and now - view.last_seen > self.lost_after_s:
                self._lose(view)

    def _beat(self) -> dict[str, Any]:
        """A beat: node 0's clock, and how often each node should send its news (so that
        all of them together send about MESSAGES_PER_S)."""
        every = max(PUSH_EVERY_S, len(self.hub.peers) / MESSAGES_PER_S)
        return {"t": time.time_ns(), "every": round(every, 3)}

    def _flush(self) -> None:
        while self._outbox:
            topic, value = self._outbox.popleft()
            self._broadcast(topic, value)

    def _broadcast(self, topic: str, value: Any) -> None:
        """To every joined node: the body made once, sealed in each node's session."""
        self.hub.broadcast(list(self._peers.values()), topic, value)

    def _on_message(self, peer: Peer, msg: Received) -> None:
        if msg.topic == "hello":
            self._hello(peer, msg)
        elif msg.topic == "report" and peer.node is not None \
                and isinstance(msg.value, dict) and peer.node in self.nodes:
            self._take(self.nodes[peer.node], NodeReport.parse(msg.value))
        else:
            self.hub.drop(peer, f"{msg.topic!r} on the connection of "
                          f"{peer.node or 'a node not yet joined'!r}")

    def _hello(self, peer: Peer, msg: Received) -> None:
        """A node names itself, once, on its own connection (sealed in its session)."""
        raw = msg.value.get("node") if isinstance(msg.value, dict) else None
        node = node_name(raw)
        if node is None or node == "0" or peer.node is not None:
            self.hub.drop(peer, f"a hello that names {str(raw)[:32]!r}")
            return
        old = self._peers.get(node)
        if old is not None and not old.closed:
            self.hub.drop(peer, f"node {node} is already joined")
            return
        peer.node = node
        self._peers[node] = peer
        for topic, value in list(self._kept.items()):  # what the others were told already
            self.hub.send(peer, topic, value)
        if node not in self.nodes:
            self.nodes[node] = NodeView(node)
            self.log("node_joined", node=node)
            self.say(f"node {node} joined")

    def _take(self, view: NodeView, item: NodeReport) -> None:
        received = time.time_ns()
        if item.t_ns is not None:
            sample = item.t_ns - received  # its clock minus ours, less the message's delay
            view.skew_ns = sample if view.skew_ns is None else max(view.skew_ns, sample)
        view.host = item.host or view.host
        view.attempt = item.attempt if item.attempt is not None else view.attempt
        mirror = view.mirror
        if mirror is None or view.mirror_attempt != view.attempt:
            mirror = node_dir(self.run_dir_of(view.attempt), view.node)
            if not (mirror / NODE_FILE).exists():
                self._write_node(view, mirror)  # before its traces: read as another host's
            view.mirror, view.mirror_attempt = mirror, view.attempt
        if item.delta is not None and (item.delta.get("rings") or item.delta.get("files")):
            for problem in apply_delta(mirror, item.delta)[:3]:
                self.problem(problem)
        with self._lock:
            if item.progress:
                view.progress = item.progress
            view.acked = max((view.acked, *item.acks))
            if item.ranks is not None:
                view.ranks = set(item.ranks)
            view.last_seen = time.monotonic()
            view.read_final = view.read_final or item.read_final
            if item.done:
                view.done = True
                view.exit_code = item.exit_code
        if view.lost:
            view.lost = False
            self.say(f"node {view.node} (host {view.host}) answers again", "yellow")
            self.log("node_back", node=view.node)
        if view.written_skew is None or view.skew_ns is None or \
                abs(view.skew_ns - view.written_skew) > SKEW_CHANGE_NS or item.done:
            self._write_node(view, mirror)

    def _write_node(self, view: NodeView, mirror: Path, lost: bool | None = None) -> None:
        make_dirs(mirror)
        view.written_skew = view.skew_ns
        write_json_atomic(mirror / NODE_FILE, {
            "node": view.node, "host": view.host, "clock_skew_ns": view.skew_ns,
            "lost": view.lost if lost is None else lost, "lost_at_ns": view.lost_at_ns,
            "done": view.done, "exit_code": view.exit_code, "attempt": view.attempt})

    def _lose(self, view: NodeView) -> None:
        view.lost_at_ns = time.time_ns()
        self._write_node(view, node_dir(self.run_dir_of(view.attempt), view.node), lost=True)
        ranks = f" (ranks {', '.join(map(str, sorted(view.ranks)))})" if view.ranks else ""
        self.say(f"lost contact with node {view.node} (host {view.host or '?'}){ranks}: no "
                 f"message for {self.lost_after_s:.0f} s; its ranks are unreachable", "red")
        self.log("node_lost", node=view.node, host=view.host, ranks=sorted(view.ranks))
        view.lost = True  # last: whoever sees the node lost finds its node.json saying so

    def members(self) -> list[str]:
        """The nodes in the job now: node 0 and every other node not lost."""
        return ["0"] + sorted(v.node for v in list(self.nodes.values()) if not v.lost)

    # -- for the supervisor ---------------------------------------------------------------
    def apply_progress(self, job: JobView) -> None:
        """The other nodes' progress facts (on their own clocks) onto their ranks."""
        with self._lock:
            facts = {v.host: v.progress for v in self.nodes.values()}
        for run in job.ranks.values():
            fact = facts.get(str(run.header.host), {}).get(str(run.rank))
            if fact is not None:
                if fact.progress_ns is not None:
                    run.progress_ns = fact.progress_ns
                if fact.cpu_busy is not None:
                    run.cpu_busy = fact.cpu_busy

    def request_stacks(self, ranks: list[int] | None) -> int:
        """Ask the other nodes for their ranks' stacks (all ranks when None)."""
        with self._lock:
            self._asked += 1
            n = self._asked
        self._outbox.append(("ask", {"n": n, "ranks": ranks}))
        return n

    def wait_acks(self, n: int, timeout_s: float) -> list[str]:
        """Wait until every node still there answered request ``n``; the nodes that did not."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                late = [v.node for v in self.nodes.values()
                        if not v.lost and not v.done and v.acked < n]
            if not late or time.monotonic() > deadline:
                return late
            time.sleep(0.05)

    def wait_done(self, timeout_s: float) -> list[str]:
        """Wait until every node still there sent its last copy; the nodes that did not."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                late = [v.node for v in self.nodes.values() if not v.lost and not v.done]
                missing = self.expected - len(self.nodes)
            if (not late and missing <= 0) or time.monotonic() > deadline or self.failed:
                return late
            time.sleep(0.1)

    def mark_lost(self, nodes: list[str]) -> None:
        """Nodes that sent no last word in time: unreachable from now on."""
        for node in nodes:
            view = self.nodes.get(node)
            if view is not None and not view.lost:
                self._lose(view)

    def publish_verdict(self, reason: str, message: str, stop: bool, exit_code: int) -> None:
        self._publish("verdict", {"reason": reason, "message": message, "stop": stop,
                                  "exit_code": exit_code})

    def _publish(self, topic: str, value: Any) -> None:
        """Tell every node now, and every node that joins later."""
        self._kept[topic] = value
        self._outbox.append((topic, value))

    def publish_final(self, report: str | None, outcome: str | None, host: str) -> None:
        """Tell the other nodes where the report is; wait (10 s at most: a loaded node reads
        it in milliseconds) until each says, sealed, that it read it: the channel goes with
        this process."""
        self._publish("final", {"report": report, "outcome": outcome, "host": host})
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            with self._lock:
                unread = [v for v in self.nodes.values() if not v.lost and not v.read_final]
            if not unread:
                return
            time.sleep(0.05)

    def summary(self) -> list[dict[str, Any]]:
        """The nodes as the report lists them."""
        with self._lock:
            return [{"node": v.node, "host": v.host, "lost": v.lost, "done": v.done,
                     "exit_code": v.exit_code, "clock_skew_s": None if v.skew_ns is None else
                     round(v.skew_ns / 1e9, 3)} for v in self.nodes.values()]
