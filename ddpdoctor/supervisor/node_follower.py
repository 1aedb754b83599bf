"""Another node's side of a many-node job: copy this node's run dir to node 0, follow it.

A thread connects to node 0 over the nodes' channel (node_channel: both ends prove the
job's secret before anything else is read), then a few times a second sends what changed in
this node's run dir (trace records, logs, stacks), its ranks' progress and the stack
requests it answered, and takes node 0's beats, stack requests, verdict and final word.
When node 0 cannot be reached, or stops answering, the node falls back to deciding alone
(its own per-node report).  It first learns node 0's session from a fresh beat sealed with
the job's secret, and takes only what node 0 sealed in that session (node_auth).
"""

from __future__ import annotations

import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable

from ddpdoctor.host import host_name
from ddpdoctor.supervisor.node_auth import Refused, Seal
from ddpdoctor.supervisor.node_channel import (MAX_MESSAGE_BYTES, Received, connect, frame,
                                               open_frame)
from ddpdoctor.supervisor.node_messages import FinalWord, NodeVerdict, StackAsk
from ddpdoctor.supervisor.node_store import NodeSetup
from ddpdoctor.trace.sync import RunDirDelta, split_delta

PUSH_EVERY_S = 0.25  # at least; node 0's beats may ask for less often (many nodes)
MAX_PUSH_EVERY_S = 2.0
CONNECT_S = 60.0  # how long node 0's channel may take to come up
LEADER = "0"  # node 0's name as a sender
MAX_ASKS_SEEN = 256


class NodeFollower:
    """The link of a node's supervisor to node 0 (a daemon thread)."""

    def __init__(self, setup: NodeSetup, node: str, run_dir: Callable[[], tuple[int, Path]],
                 lost_after_s: float, secret: str, log: Callable[..., None]):
        self.setup = setup
        self.node = node
        self.seal = Seal(secret, node, None)  # node 0's session: learnt from its beat
        self.log = log
        self.run_dir = run_dir  # -> (attempt, the run dir now watched)
        self.lost_after_s = lost_after_s
        self.conn: Connection | None = None
        self.failed: str | None = None  # why this node decides alone, once it must
        self.verdict: dict[str, Any] | None = None
        self.final: dict[str, Any] | None = None
        self.asks: list[tuple[int, list[int] | None]] = []  # stack requests to answer
        self.progress: dict[str, Any] = {}  # set by the supervisor's loop
        self.ranks: list[int] = []
        self._acks: list[int] = []
        self._asks_seen: set[int] = set()
        self._read_final = False
        self._done: int | None = None
        self._sent_done = threading.Event()
        self._delta: tuple[Path, RunDirDelta] | None = None
        self._drops = 0
        self.push_every = PUSH_EVERY_S
        self._leader_seen = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ddpdoctor-nodes", daemon=True)

    @property
    def linked(self) -> bool:
        """Connected (or still connecting) and node 0 answers, or node 0 said its final
        word (it may close the channel a moment later): node 0 decides."""
        return self.failed is None or self.final is not None

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)

    def answered(self, n: int) -> None:
        """The supervisor captured the stacks of request ``n`` (sent with the next push)."""
        with self._lock:
            self._acks.append(n)

    def finish(self, exit_code: int | None, timeout_s: float) -> dict[str, Any] | None:
        """This node's job ended: send the last copy, then wait for node 0's final word."""
        self._done = exit_code if exit_code is not None else -1
        deadline = time.monotonic() + min(timeout_s, 10.0)
        while not self._sent_done.is_set() and self.final is None and self.linked and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        deadline = time.monotonic() + timeout_s
        while self.final is None and self.linked and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.final

    # -- the thread ---------------------------------------------------------------------
    def _dropped(self, why: str) -> None:
        self._drops += 1
        if self._drops <= 20 or self._drops % 1000 == 0:
            self.log("store_refused", key="node 0", why=why, count=self._drops)

    def _run(self) -> None:
        try:
            deadline = time.monotonic() + CONNECT_S
            self.conn = connect(self.setup.host, self.setup.port, self.seal.secret.decode(),
                                CONNECT_S, self._stop)
            self._learn_session(deadline)
            self._send("hello", {"node": self.node, "host": host_name()})
        except Exception as e:  # noqa: BLE001 - no node 0: this node decides alone
            first = str(e).splitlines()[0][:120] if str(e) else ""
            self.failed = (f"cannot reach node 0 at {self.setup.address} "
                           f"({type(e).__name__}: {first})")
            self._close_conn()
            return
        next_push = time.monotonic()
        while not self._stop.is_set() and self.failed is None:
            try:
                wait = max(0.0, next_push - time.monotonic())
                if self.conn.poll(wait):
                    self._take(self.conn.recv_bytes(MAX_MESSAGE_BYTES))
                ended = self._done is not None and not self._sent_done.is_set()
                if time.monotonic() >= next_push or self._acks or ended:
                    self._push()
                    next_push = time.monotonic() + self.push_every
                if time.monotonic() - self._leader_seen > self.lost_after_s:
                    self.failed = f"node 0 stopped answering through {self.setup.address}"
            except Exception as e:  # noqa: BLE001 - node 0 gone or the network down
                self.failed = f"lost node 0 at {self.setup.address} ({type(e).__name__}: {e})"
        if self.failed is not None and self.final is None:
            self.log("node_link_failed", why=self.failed[:300])
        self._close_conn()

    def _close_conn(self) -> None:
        if self.conn is not None:
            self.conn.close()

    def _send(self, topic: str, value: Any) -> None:
        assert self.conn is not None
        self.conn.send_bytes(frame(topic, self.seal.seal(topic, value)))

    def _learn_session(self, deadline: float) -> None:
        """Node 0's session, from a beat it sealed with the job's secret and stamped near
        our clock (an old job's beat is not taken); raises TimeoutError."""
        assert self.conn is not None
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or self._stop.is_set():
                raise TimeoutError("no beat of node 0 sealed with this job's secret (is it "
                                   "the same on every node?)")
            if not self.conn.poll(min(left, 1.0)):
                continue
            try:
                msg = open_frame(self.seal, self.conn.recv_bytes(MAX_MESSAGE_BYTES))
            except Refused as e:
                self._dropped(str(e))
                continue
            if msg.topic == "beat" and msg.sender == LEADER and self.seal.fresh_ns(msg.t_ns):
                self.seal.session = msg.session
                self._leader_seen = time.monotonic()
                self._take_beat(msg)
                return

    def _take(self, raw: bytes) -> None:
        """One message of node 0's: only what it sealed in its session counts."""
        try:
            msg = open_frame(self.seal, raw)
        except Refused as e:
            self._dropped(str(e))
            return
        if msg.sender != LEADER:
            self._dropped(f"{msg.topic!r} from {msg.sender[:32]!r}, not node 0")
            return
        self._leader_seen = time.monotonic()
        if msg.topic == "beat":
            self._take_beat(msg)
        elif msg.topic == "ask":
            self._take_ask(msg)
        elif msg.topic == "verdict" and self.verdict is None:
            verdict = NodeVerdict.parse(msg.value)
            self.verdict = verdict.as_dict() if verdict is not None else None
        elif msg.topic == "final" and self.final is None:
            final = FinalWord.parse(msg.value)
            if final is not None:
                self.final = final.as_dict()
                self._read_final = True  # said with every later push, and now:
                self._send("report", {"t": time.time_ns(), "read_final": True})

    def _take_beat(self, msg: Received) -> None:
        """How often node 0 wants this node's news (within PUSH_EVERY_S..MAX_PUSH_EVERY_S)."""
        every = msg.value.get("every") if isinstance(msg.value, dict) else None
        if type(every) in (int, float):
            self.push_every = min(MAX_PUSH_EVERY_S, max(PUSH_EVERY_S, float(every)))

    def _take_ask(self, msg: Received) -> None:
        """A stack request of node 0's, each once."""
        n = msg.value.get("n") if isinstance(msg.value, dict) else None
        ask = StackAsk.parse(msg.value)
        if type(n) is not int or ask is None or n in self._asks_seen:
            return
        self._asks_seen.add(n)
        if len(self._asks_seen) > MAX_ASKS_SEEN:
            self._asks_seen.discard(min(self._asks_seen))
        with self._lock:
            self.asks.append((n, list(ask.ranks) if ask.ranks is not None else None))

    def _push(self) -> None:
        """This node's news since the last push, in as many sealed messages as the
        channel's message size needs (the last one says whether the job ended)."""
        done = self._done
        attempt, run_dir = self.run_dir()
        if self._delta is None or self._delta[0] != run_dir:
            self._delta = (run_dir, RunDirDelta(run_dir))
        with self._lock:
            acks, self._acks = self._acks, []
        parts = split_delta(self._delta[1].collect(), MAX_MESSAGE_BYTES // 2)
        for n, part in enumerate(parts):
            item: dict[str, Any] = {"t": time.time_ns(), "host": host_name(),
                                    "attempt": attempt, "delta": part}
            if n == len(parts) - 1:
                item.update(progress=self.progress, acks=acks, ranks=self.ranks)
                if done is not None:
                    item.update(done=True, exit_code=done)
                if self._read_final:
                    item["read_final"] = True
            self._send("report", item)
        if done is not None:
            self._sent_done.set()
