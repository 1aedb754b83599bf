"""Another node's side of a many-node job: copy this node's run dir to node 0, follow it.

A thread connects to node 0's store, then a few times a second pushes what changed in this
node's run dir (trace records, logs, stacks), its ranks' progress and the stack requests
it answered, and reads node 0's verdict and final word.  When node 0 cannot be reached, or
stops answering, the node falls back to deciding alone (its own per-node report).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

from ddpdoctor.host import host_name
from ddpdoctor.supervisor.node_store import NodeSetup, NodeStore
from ddpdoctor.trace.sync import RunDirDelta

PUSH_EVERY_S = 0.25
CONNECT_S = 60.0  # how long node 0's store may take to come up


class NodeFollower:
    """The link of a node's supervisor to node 0 (a daemon thread)."""

    def __init__(self, setup: NodeSetup, node: str, run_dir: Callable[[], tuple[int, Path]],
                 lost_after_s: float):
        self.setup = setup
        self.node = node
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
        self._answered = 0
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
    def _run(self) -> None:
        try:
            self.store = NodeStore.open(self.setup, False, CONNECT_S)
            self.store.set(f"node/{self.node}/hello", {"host": host_name(), "t": time.time_ns()})
            index = self.store.add("nodes/claimed", 1) - 1
            self.store.set(f"nodes/{index}", self.node)
            self.store.add("nodes/count", 1)
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

    def _tick(self) -> None:
        store = self.store
        assert store is not None
        beat = store.get("leader/beat")
        if beat != self._leader_beat:
            self._leader_beat, self._leader_seen = beat, time.monotonic()
        elif time.monotonic() - self._leader_seen > self.lost_after_s:
            self.failed = f"node 0 stopped answering through {self.setup.address}"
            return
        asked = store.add("stacks/asked", 0)
        while self._answered < asked:
            self._answered += 1
            ask = store.get(f"stacks/ask/{self._answered}") or {}
            ranks = ask.get("ranks") if isinstance(ask, dict) else None
            with self._lock:
                self.asks.append((self._answered, ranks if isinstance(ranks, list) else None))
        self._push(store)
        if self.verdict is None:
            self.verdict = store.get("verdict")
        if self.final is None:
            self.final = store.get("final")
            if self.final is not None:
                store.add("final/read", 1)

    def _push(self, store: NodeStore) -> None:
        done = self._done
        attempt, run_dir = self.run_dir()
        if self._delta is None or self._delta[0] != run_dir:
            self._delta = (run_dir, RunDirDelta(run_dir))
        with self._lock:
            acks, self._acks = self._acks, []
        item = {"t": time.time_ns(), "host": host_name(), "attempt": attempt,
                "delta": self._delta[1].collect(), "progress": self.progress, "acks": acks,
                "ranks": self.ranks}
        if done is not None:
            item.update(done=True, exit_code=done)
        store.push(f"node/{self.node}/q", item)
        if done is not None:
            self._sent_done.set()
