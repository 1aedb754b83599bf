"""Another node's side of a many-node job: copy this node's run dir to node 0, follow it.

A thread connects to node 0's store, then a few times a second pushes what changed in this
node's run dir (trace records, logs, stacks), its ranks' progress and the stack requests
it answered, and reads node 0's verdict and final word.  When node 0 cannot be reached, or
stops answering, the node falls back to deciding alone (its own per-node report).  It
first learns node 0's session from a fresh beat sealed with the job's secret, and takes
from the store only what node 0 sealed in that session (node_auth).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

from ddpdoctor.host import host_name
from ddpdoctor.supervisor.node_auth import MAX_VALUE_BYTES, Refused, Seal
from ddpdoctor.supervisor.node_messages import FinalWord, NodeVerdict, StackAsk
from ddpdoctor.supervisor.node_store import NodeSetup, NodeStore
from ddpdoctor.trace.sync import RunDirDelta, split_delta

PUSH_EVERY_S = 0.25
CONNECT_S = 60.0  # how long node 0's store may take to come up
ASK_WINDOW = 32  # the newest stack requests looked at
LEADER = "0"  # node 0's name as a sender


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
        self.store: NodeStore | None = None
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
        self._leader_beat: Any = None
        self._leader_seen = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ddpdoctor-nodes", daemon=True)

    @property
    def linked(self) -> bool:
        """Connected (or still connecting) and node 0 answers: node 0 decides."""
        return self.failed is None

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
    def _dropped(self, key: str, why: str, count: int) -> None:
        self.log("store_refused", key=key[:128], why=why, count=count)

    def _run(self) -> None:
        try:
            deadline = time.monotonic() + CONNECT_S
            self.store = NodeStore.open(self.setup, False, CONNECT_S, self.seal, self._dropped)
            self._learn_session(deadline)
            self.store.set(f"node/{self.node}/hello", {"host": host_name(), "t": time.time_ns()})
            index = self.store.add("nodes/claimed", 1) - 1
            self.store.set(f"nodes/{index}", self.node)
        except Exception as e:  # noqa: BLE001 - no node 0: this node decides alone
            self.failed = (f"cannot reach node 0's store at {self.setup.address} "
                           f"({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})")
            return
        while not self._stop.is_set() and self.failed is None:
            try:
                self._tick()
            except Exception as e:  # noqa: BLE001 - node 0 gone or the network down
                self.failed = f"lost node 0's store at {self.setup.address} ({type(e).__name__})"
                return
            self._stop.wait(PUSH_EVERY_S)

    def _learn_session(self, deadline: float) -> None:
        """Node 0's session, from a beat it sealed with the job's secret and stamped near
        our clock (an old job's beat is not taken); raises TimeoutError."""
        assert self.store is not None
        while True:
            try:
                msg = self.store.read("leader/beat")
            except Refused:
                msg = None
            if msg is not None and msg.sender == LEADER and self.seal.fresh_ns(msg.t_ns):
                self.seal.session = msg.session
                return
            if time.monotonic() > deadline or self._stop.is_set():
                raise TimeoutError("no beat of node 0 sealed with this job's "
                                   "DDPDOCTOR_STORE_SECRET (is it the same on every node?)")
            time.sleep(0.1)

    def _tick(self) -> None:
        store = self.store
        assert store is not None
        beat = store.get("leader/beat", LEADER)
        if beat is not None and beat != self._leader_beat:
            self._leader_beat, self._leader_seen = beat, time.monotonic()
        elif time.monotonic() - self._leader_seen > self.lost_after_s:
            self.failed = f"node 0 stopped answering through {self.setup.address}"
            return
        self._take_asks(store)
        self._push(store)
        if self.verdict is None:
            verdict = NodeVerdict.parse(store.get("verdict", LEADER))
            self.verdict = verdict.as_dict() if verdict is not None else None
        if self.final is None:
            final = FinalWord.parse(store.get("final", LEADER))
            if final is not None:
                self.final = final.as_dict()
                self._read_final = True  # said with every later push, and now:
                store.push(f"node/{self.node}/q", {"t": time.time_ns(), "read_final": True})

    def _take_asks(self, store: NodeStore) -> None:
        """Node 0's stack requests, each once: only those it sealed (a request number
        bumped by someone else is an empty slot, skipped)."""
        asked = store.add("stacks/asked", 0)
        for n in range(max(1, asked - ASK_WINDOW + 1), asked + 1):
            if n in self._asks_seen:
                continue
            try:
                msg = store.read(f"stacks/ask/{n}")
            except Refused:  # told to the log once: not looked at again
                self._asks_seen.add(n)
                continue
            if msg is None:
                continue  # not written yet
            self._asks_seen.add(n)
            ask = StackAsk.parse(msg.value) if msg.sender == LEADER else None
            if ask is not None:
                with self._lock:
                    self.asks.append((n, list(ask.ranks) if ask.ranks is not None else None))
        self._asks_seen = {n for n in self._asks_seen if n > asked - ASK_WINDOW}

    def _push(self, store: NodeStore) -> None:
        """This node's news since the last push, in as many sealed items as the store's
        value size needs (the last one says whether the job ended)."""
        done = self._done
        attempt, run_dir = self.run_dir()
        if self._delta is None or self._delta[0] != run_dir:
            self._delta = (run_dir, RunDirDelta(run_dir))
        with self._lock:
            acks, self._acks = self._acks, []
        parts = split_delta(self._delta[1].collect(), MAX_VALUE_BYTES // 2)
        for n, part in enumerate(parts):
            item: dict[str, Any] = {"t": time.time_ns(), "host": host_name(),
                                    "attempt": attempt, "delta": part}
            if n == len(parts) - 1:
                item.update(progress=self.progress, acks=acks, ranks=self.ranks)
                if done is not None:
                    item.update(done=True, exit_code=done)
                if self._read_final:
                    item["read_final"] = True
            store.push(f"node/{self.node}/q", item)
        if done is not None:
            self._sent_done.set()
