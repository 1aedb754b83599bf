"""Shared-memory links between ring neighbours on one host: slots in a memfd, signals on a socket.

A rank's ring on a process group has two links: out to its right neighbour and in from
its left one.  Each link is a memfd of ``SLOTS`` slots of ``SLOT_BYTES`` that only its
sender writes (sealed at its size; the receiver gets a read-only descriptor of it and
maps it copy-on-write, so it can never write the sender's memory), and a unix stream socket on which the sender says
"slot filled" (``DATA``, with the call's size in bytes, so both ends can check they hold
the same tensor) and the receiver answers "slot free" (``CREDIT``).  Bytes move once
(into the slot) and the receiver reduces straight out of it: no kernel copy, no TCP
stack, no thread hand-off; a peer that exits closes its sockets, so a waiting rank hears
it at once.

The links of a group are made at its first ring call (``links_for``), by every rank of
the group at the same call (``shm_setup``: the ranks trade what their neighbours must know
over the group's own send/recv, each end checks with ``SO_PEERCRED`` that the other is its
neighbour, and the ranks agree around the ring that every link works).  If any rank cannot
(another host, another network or pid namespace, no memfd, another
``DDPDOCTOR_RING_SLOT_BYTES``, ``DDPDOCTOR_RING_TRANSPORT=gloo``, or ``tcp``: the same), no
rank of the group uses them and the ring runs over gloo's send/recv as before.  Which of
the two a group uses, and why, goes into the rank's meta log (a ``transport`` event).
Errors name the neighbours by their global ranks.
"""

from __future__ import annotations

import mmap
import atexit
import os
import select
import socket
import struct
import threading
import weakref
from collections import deque
from datetime import timedelta
from typing import Any

import torch

from ddpdoctor.ddp import shm_setup
from ddpdoctor.ddp.ring_plan import env_bytes, global_rank
from ddpdoctor.runtime import recorder

# The same on every rank of a group (its set-up checks): a piece is at most one slot.
SLOT_BYTES = env_bytes("DDPDOCTOR_RING_SLOT_BYTES", 2 << 20, 64) // 64 * 64
SLOTS = 2
DATA, CREDIT = b"D", b"C"
_MSG = struct.Struct("<c7xq")  # kind, value
_DEFAULT_TIMEOUT_S = 1800.0


def wanted() -> bool:
    """Whether this rank offers shared-memory links (``DDPDOCTOR_RING_TRANSPORT``)."""
    return os.environ.get("DDPDOCTOR_RING_TRANSPORT", "auto").lower() not in ("gloo", "tcp")


class LinkBroken(RuntimeError):
    """A link can no longer carry the ring: its peer left, timed out or disagreed."""


class _Wire:
    """One end of a link's socket: fixed-size messages, parsed as they arrive.  A peer that
    has gone is remembered (``gone``, ``deaf``), not raised at once: what it sent before it
    left still counts, and a message to it is moot; only waiting for it fails."""

    def __init__(self, sock: socket.socket, peer: int):
        self.sock, self.peer = sock, peer
        self.fd = sock.fileno()
        self.buf = bytearray()
        self.gone: str | None = None  # set once the peer's end is closed and read out
        self.deaf = False  # the peer no longer reads

    def post(self, kind: bytes, value: int = 0) -> None:
        if not self.deaf:
            try:
                self.sock.sendall(_MSG.pack(kind, value))
            except OSError:  # the peer closed its end: what it left unread is moot
                self.deaf = True

    def take(self) -> list[tuple[bytes, int]]:
        """The whole messages readable now (the socket is ready); [] once the peer is gone."""
        try:
            data = self.sock.recv(1 << 16)
        except OSError as exc:
            self.gone = f" ({exc.strerror or exc})"
            return []
        if not data:
            self.gone = self.gone or ""
            return []
        self.buf += data
        whole = len(self.buf) // _MSG.size * _MSG.size
        msgs = [(k, v) for k, v in _MSG.iter_unpack(self.buf[:whole])]
        del self.buf[:whole]
        return msgs

    def lost(self) -> LinkBroken:
        """The error for waiting on a peer that has gone (worded as a peer's absence)."""
        return LinkBroken(f"ring: connection closed by peer rank {self.peer} (it exited or "
                          f"failed){self.gone or ''}")

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Links:
    """This rank's two links in the ring of one process group, and their flow state."""

    def __init__(self, out: _Wire, into: _Wire, out_map: mmap.mmap, in_map: mmap.mmap,
                 timeout_s: float):
        self.out, self.into = out, into
        self._maps = (out_map, in_map)  # kept alive with the views on them
        self.out_slots = torch.frombuffer(out_map, dtype=torch.uint8)
        self.in_slots = torch.frombuffer(in_map, dtype=torch.uint8)
        self.credits = SLOTS  # free slots at the right neighbour
        self.out_next = 0  # slot counters, kept across calls
        self.in_next = 0
        self.arrived: deque[int] = deque()  # DATA values not yet consumed
        self.broken: str | None = None
        self.lock = threading.Lock()
        self.timeout_ms = int(timeout_s * 1000)
        self._poll = select.poll()
        for wire in (out, into):
            self._poll.register(wire.fd, select.POLLIN)

    def slot(self, counter: int) -> int:
        """Byte offset of the slot a message counter lands in."""
        return (counter % SLOTS) * SLOT_BYTES

    def wait(self, need_credit: bool, need_data: bool) -> None:
        """Block until a message arrives, then take it in; raise if what this rank needs (a
        free slot at the right, data from the left) can no longer come, or nothing came
        for the group's timeout."""
        for needed, wire in ((need_data and not self.arrived, self.into),
                             (need_credit and not self.credits, self.out)):
            if needed and wire.gone is not None:
                raise wire.lost()
        ready = self._poll.poll(self.timeout_ms)
        if not ready:
            raise LinkBroken(f"ring: no message from rank {self.into.peer} or rank "
                             f"{self.out.peer} for {self.timeout_ms / 1000:.0f} s (the "
                             f"group's timeout)")
        for fd, _ in ready:
            wire = self.out if fd == self.out.fd else self.into
            msgs = wire.take()
            if wire.gone is not None:
                self._poll.unregister(fd)
            expected = CREDIT if wire is self.out else DATA
            for kind, value in msgs:
                if kind != expected:
                    raise LinkBroken(f"ring: unexpected message {kind!r} from rank "
                                     f"{wire.peer}")
                if kind == CREDIT:
                    self.credits += 1
                else:
                    self.arrived.append(value)


_links: "weakref.WeakKeyDictionary[Any, Links | None]" = weakref.WeakKeyDictionary()
_setup_locks: "weakref.WeakKeyDictionary[Any, threading.Lock]" = weakref.WeakKeyDictionary()
_locks_lock = threading.Lock()


def links_for(pg: Any) -> Links | None:
    """The shared-memory links of this rank in ``pg``'s ring, made at the first call (every
    rank of ``pg`` must make that call: it is a collective); None: the ring uses gloo.
    Each group sets up under its own lock: two threads setting up two groups, in whatever
    order the ranks reach them, never wait for each other."""
    try:
        return _links[pg]
    except KeyError:
        pass
    with _locks_lock:
        lock = _setup_locks.setdefault(pg, threading.Lock())
    with lock:
        if pg not in _links:
            _links[pg] = _setup(pg)
        return _links[pg]


def _timeout_s(pg: Any) -> float:
    try:
        timeout = pg._get_backend(torch.device("cpu")).options._timeout
        return timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    except Exception:  # noqa: BLE001 - any backend without the attribute
        return _DEFAULT_TIMEOUT_S


def _setup(pg: Any) -> Links | None:
    n, r = pg.size(), pg.rank()
    outcome = shm_setup.setup(pg, wanted(), SLOT_BYTES, SLOTS * SLOT_BYTES)
    links = None
    made = outcome.made
    if made is not None:
        try:
            links = Links(_Wire(made.out_sock, global_rank(pg, (r + 1) % n)),
                          _Wire(made.into_sock, global_rank(pg, (r - 1) % n)),
                          made.out_map, made.in_map, _timeout_s(pg))
        except (OSError, ValueError, RuntimeError) as e:  # torch could not view the maps
            for thing in (made.out_sock, made.into_sock, made.out_map, made.in_map):
                thing.close()
            outcome = shm_setup.Outcome(None, f"the slots could not be viewed ({e})",
                                        outcome.refused)
    _record(pg, outcome, links is not None)
    return links


def _record(pg: Any, outcome: "shm_setup.Outcome", shm: bool) -> None:
    """The group's transport, and why, in this rank's meta log (``transport`` event); a
    stranger's refused connections with it."""
    rec = recorder.active()
    if rec is None:
        return
    try:
        group = rec.group_index(pg)
    except (RuntimeError, ValueError, TypeError):  # an unregistered group: named only
        group = None
    fields: dict[str, Any] = {"group": group, "transport": "shm" if shm else "gloo",
                              "why": outcome.why}
    if outcome.refused:
        fields["refused"] = outcome.refused
    rec.meta("transport", **fields)


def _close_all() -> None:
    """Close this process's ring sockets: at the interpreter's end (as its exit would, so
    that a user who runs with warnings on sees no ResourceWarning of ddpdoctor's), and in a
    forked child."""
    for links in list(_links.values()):
        if links is not None:
            links.out.close()
            links.into.close()


def _forget_in_child() -> None:
    """A forked child (a DataLoader worker) must not hold the ring's sockets: a rank that
    exits would stay connected through its workers, and its neighbours not hear of it."""
    global _links
    _close_all()
    _links = weakref.WeakKeyDictionary()


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(_close_all)
