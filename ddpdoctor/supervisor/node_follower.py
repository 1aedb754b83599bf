"""Another node's side of a many-node job: copy this node's run dir to node 0, follow it.

A thread connects to node 0 over the nodes' channel (node_link: both ends prove the
job's secret before anything else is read), then a few times a second sends what changed in
this node's run dir (trace records, logs, stacks), its ranks' progress and the stack
requests it answered, and takes node 0's beats, stack requests, verdict and final word.
When node 0 cannot be reached, or stops answering, the node falls back to deciding alone
(its own per-node report), and says why: when what answers at node 0's address never proves
the secret (another program holds the port), that is said as such (``unproven``).  It takes
only what node 0 sealed in this connection's own session (node_auth): a frame of another
connection, of an earlier job, or replayed, is refused.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

from ddpdoctor.host import host_name
from ddpdoctor.supervisor.node_auth import Refused, channel_key
from ddpdoctor.supervisor.node_frames import MAX_MESSAGE_BYTES
from ddpdoctor.supervisor.node_link import NodeLink, Unproven, connect
from ddpdoctor.supervisor.node_messages import FinalWord, NodeVerdict, StackAsk
from ddpdoctor.supervisor.node_store import NodeSetup
from ddpdoctor.trace.sync import RunDirDelta, split_delta

PUSH_EVERY_S = 0.25  # at least; node 0's beats may ask for less often (many nodes)
MAX_PUSH_EVERY_S = 2.0
CONNECT_S = 60.0  # how long node 0's channel may take to come up
MAX_ASKS_SEEN = 256


class NodeFollower:
    """The link of a node's supervisor to node 0 (a daemon thread)."""

    def __init__(self, setup: NodeSetup, node: str, run_dir: Callable[[], tuple[int, Path]],
                 lost_after_s: float, secret: str, log: Callable[..., None]):
        self.setup = setup
        self.node = node
        self.key = channel_key(secret)
        self.log = log
        self.run_dir = run_dir  # -> (attempt, the run dir now watched)
        self.lost_after_s = lost_after_s
        self.link: NodeLink | None = None
        self.failed: str | None = None  # why this node decides alone, once it must
        self.unproven = False  # what answers at node 0's address never proved the secret
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
            self.link = connect(self.setup.host, self.setup.port, self.key, CONNECT_S,
                                self._stop.is_set)
            # node 0 just proved the secret: it answers now, however long it took to reach
            # (a slow node 0, a relay holding the connection); silence counts from here
            self._leader_seen = time.monotonic()
            self._send("hello", {"node": self.node, "host": host_name()})
        except Unproven as e:  # another program holds the port: said as such, loud
            self.unproven = True
            self.failed = str(e)
            self.log("node_channel_unproven", why=self.failed[:300])
            self._close_conn()
            return
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
                for frame in self.link.receive(wait):  # whole within its deadline
                    self._take(frame)
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
        if self.link is not None:
            self.link.close()

    def _send(self, topic: str, value: Any) -> None:
        assert self.link is not None
        self.link.send(topic, value)

    def _take(self, frame: bytes) -> None:
        """One frame of node 0's: only what it sealed in this connection's session counts."""
        assert self.link is not None
        try:
            topic, value = self.link.open(frame)
        except Refused as e:
            self._dropped(str(e))
            return
        self._leader_seen = time.monotonic()
        if topic == "beat":
            self._take_beat(value)
        elif topic == "ask":
            self._take_ask(value)
        elif topic == "verdict" and self.verdict is None:
            verdict = NodeVerdict.parse(value)
            self.verdict = verdict.as_dict() if verdict is not None else None
        elif topic == "final" and self.final is None:
            final = FinalWord.parse(value)
            if final is not None:
                self.final = final.as_dict()
                self._read_final = True  # said with every later push, and now:
                self._send("report", {"t": time.time_ns(), "read_final": True})
        elif topic != "verdict" and topic != "final":
            self._dropped(f"{topic!r} is not what node 0 sends")

    def _take_beat(self, value: Any) -> None:
        """How often node 0 wants this node's news (within PUSH_EVERY_S..MAX_PUSH_EVERY_S)."""
        every = value.get("every") if isinstance(value, dict) else None
        if type(every) in (int, float):
            self.push_every = min(MAX_PUSH_EVERY_S, max(PUSH_EVERY_S, float(every)))

    def _take_ask(self, value: Any) -> None:
        """A stack request of node 0's, each once."""
        n = value.get("n") if isinstance(value, dict) else None
        ask = StackAsk.parse(value)
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
