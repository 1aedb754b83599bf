"""The nodes' channel, node 0's end: every connection read without blocking, each message whole within a deadline.

Each connection first runs the handshake of node_auth (both ends prove the secret over fresh
nonces, nothing else is read before), then carries frames (node_frames) sealed in that
connection's own session: one recorded elsewhere or replayed is refused.  Never pickle.

``Hub`` reads every connection from one selector, in one thread, and never waits on one of
them: a socket is read when it has bytes, a frame begun must be whole within ``MESSAGE_S``
and a handshake done within ``HANDSHAKE_S`` (a peer that trickles a byte every few seconds is
closed, and meanwhile the others are read as before), and what node 0 sends waits in a
bounded buffer per peer (one that reads nothing for ``SEND_S``, or lets more than
``MAX_OUTBOX`` pile up, is closed).  At most ``MAX_PENDING`` connections are in their
handshake at once (the oldest goes for a new one), at most ``MAX_PEERS`` authenticated, and
each peer has a quota of messages and bytes a second: one over it is not read until its
quota refills (its sends wait: TCP's own flow control).  A node's end is node_link.  The
traffic is not encrypted: what the nodes send can be read on the network path
(docs/security.md).
"""

from __future__ import annotations

import errno
import selectors
import socket
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from ddpdoctor.supervisor.node_auth import LeaderHandshake, Refused, Session, body_of
from ddpdoctor.supervisor.node_frames import (HANDSHAKE_S, MAX_MESSAGE_BYTES, ChannelError,
                                              Framed)

MAX_PENDING = 64  # connections in their handshake at once
MAX_PEERS = 8192  # authenticated connections
MSGS_PER_S = 64.0  # a peer's quota (a follower sends 4 a second)
MSG_BURST = 256.0
BYTES_PER_S = float(64 << 20)
BYTE_BURST = float(2 * MAX_MESSAGE_BYTES)
CHECK_EVERY_S = 0.1  # deadlines are checked this often


class Peer:
    """One authenticated connection on node 0: its node (once it said hello), its session,
    its quotas."""

    def __init__(self, link: Framed, session: Session, address: str):
        self.link = link
        self.session = session
        self.address = address
        self.node: str | None = None
        self.paused = False  # over its quota: not read until it refills
        self.failed = ""  # why it was closed
        self._msgs, self._bytes = MSG_BURST, BYTE_BURST
        self._refilled = time.monotonic()

    @property
    def closed(self) -> bool:
        return self.link.closed

    def send_body(self, body: bytes) -> bool:
        """Queue one message (a ``body_of``) sealed in this peer's session and send what
        the socket takes now; False when the peer is closed (``failed`` says why)."""
        if self.link.closed:
            return False
        try:
            self.link.queue(self.session.seal_body(body))
            self.link.flush(time.monotonic())
            return True
        except ChannelError as e:
            self.failed = e.strerror or str(e)
            self.close()
            return False

    def charge(self, n_bytes: int) -> None:
        self._msgs -= 1
        self._bytes -= n_bytes

    def refill(self) -> bool:
        """Top up the quotas for the time passed; whether the peer may be read."""
        now = time.monotonic()
        dt, self._refilled = now - self._refilled, now
        self._msgs = min(MSG_BURST, self._msgs + dt * MSGS_PER_S)
        self._bytes = min(BYTE_BURST, self._bytes + dt * BYTES_PER_S)
        return self._msgs > 0 and self._bytes > 0

    def close(self) -> None:
        self.link.close()


@dataclass
class _Pending:
    """A connection in its handshake."""

    link: Framed
    handshake: LeaderHandshake
    address: str
    deadline: float


@dataclass(frozen=True)
class Received:
    """A message read from a peer, opened in its session: its topic and value."""

    topic: str
    value: Any


class Hub:
    """Node 0's end: the listening socket, the newcomers' handshakes and the peers, all
    read from one selector by the thread that calls ``receive``."""

    def __init__(self, listener: socket.socket, key: bytes,
                 on_drop: Callable[[str, str, int], None]):
        self.listener = listener
        self.key = key
        self.on_drop = on_drop
        self.dropped = 0
        self.refused_connections = 0  # failed the handshake, or pushed out by newer ones
        self.peers: dict[int, Peer] = {}  # fd -> peer
        self._pending: dict[int, _Pending] = {}  # fd -> handshake, oldest first
        self._new: deque[Peer] = deque()
        self._paused: set[Peer] = set()
        self._checked = 0.0
        self._accept_after = 0.0
        self._selector = selectors.DefaultSelector()
        listener.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ, None)

    # -- newcomers ------------------------------------------------------------------------
    def _accept(self, now: float) -> None:
        if now < self._accept_after:
            return
        for _ in range(MAX_PENDING):
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._accept_after = now + 0.05  # out of descriptors: the backlog waits
                return
            host = addr[0] if isinstance(addr, tuple) and addr else str(addr)
            link = Framed(sock)
            while len(self._pending) >= MAX_PENDING:
                self._refuse(next(iter(self._pending.values())))
            pending = _Pending(link, LeaderHandshake(self.key), str(host), now + HANDSHAKE_S)
            try:
                link.queue(pending.handshake.challenge())
                link.flush(now)
            except ChannelError:
                self.refused_connections += 1
                link.close()
                continue
            self._pending[link.fileno()] = pending
            self._selector.register(link.fileno(), selectors.EVENT_READ, pending)

    def _refuse(self, pending: _Pending) -> None:
        self.refused_connections += 1
        self._pending.pop(pending.link.fileno(), None)
        self._unregister(pending.link)
        pending.link.close()

    def _on_pending(self, pending: _Pending, now: float) -> list[tuple[Peer, Received]]:
        try:
            frames = pending.link.read(now, 4096)
        except ChannelError:
            self._refuse(pending)
            return []
        if not frames:
            return []
        try:
            proof, session = pending.handshake.answer(frames[0])
            pending.link.queue(proof)
            pending.link.flush(now)
        except (Refused, ChannelError):
            self._refuse(pending)
            return []
        self._pending.pop(pending.link.fileno(), None)
        self._unregister(pending.link)
        if len(self.peers) + len(self._new) >= MAX_PEERS:
            self.refused_connections += 1
            pending.link.close()
            return []
        peer = Peer(pending.link, session, pending.address)
        self.peers[peer.link.fileno()] = peer
        self._new.append(peer)
        self._interest(peer)
        return self._open(peer, frames[1:])

    # -- reading --------------------------------------------------------------------------
    def adopt(self) -> list[Peer]:
        """The peers authenticated since the last call (closed ones are forgotten first)."""
        for peer in [p for p in self.peers.values() if p.closed]:
            self.forget(peer)
        new, self._new = [p for p in self._new if not p.closed], deque()
        return new

    def refill(self) -> None:
        """Peers paused for their quota that may be read again."""
        for peer in list(self._paused):
            if peer.closed or peer.refill():
                peer.paused = False
                self._paused.discard(peer)
                if not peer.closed:
                    self._interest(peer)

    def receive(self, timeout: float) -> list[tuple[Peer, Received]]:
        """The messages that arrived within ``timeout``, opened in their peers' sessions
        (what is not is dropped and told); deadlines are enforced on the way."""
        out: list[tuple[Peer, Received]] = []
        for key, mask in self._selector.select(timeout):
            now = time.monotonic()
            item = key.data
            if item is None:
                self._accept(now)
            elif isinstance(item, _Pending):
                out += self._on_pending(item, now)
            elif not item.closed:
                out += self._on_peer(item, mask, now)
        self._deadlines(time.monotonic())
        return out

    def _on_peer(self, peer: Peer, mask: int, now: float) -> list[tuple[Peer, Received]]:
        try:
            if mask & selectors.EVENT_WRITE:
                peer.link.flush(now)
                self._interest(peer)
            if not mask & selectors.EVENT_READ:
                return []
            frames = peer.link.read(now)
        except ChannelError as e:
            if e.errno == errno.EMSGSIZE:
                self.drop(peer, "oversized message (connection closed)")
            self.forget(peer)
            return []
        return self._open(peer, frames)

    def _open(self, peer: Peer, frames: list[bytes]) -> list[tuple[Peer, Received]]:
        out = []
        for raw in frames:
            peer.charge(len(raw))
            try:
                topic, value = peer.session.open(raw)
            except Refused as e:
                self.drop(peer, str(e))
                continue
            out.append((peer, Received(topic, value)))
        if not peer.refill() and not peer.closed:
            peer.paused = True
            self._paused.add(peer)
            self._interest(peer)
        return out

    def _deadlines(self, now: float) -> None:
        if now - self._checked < CHECK_EVERY_S:
            return
        self._checked = now
        for pending in [p for p in self._pending.values() if now > p.deadline]:
            self._refuse(pending)
        for peer in list(self.peers.values()):
            why = peer.link.overdue(now)
            if why:
                self.drop(peer, f"{why}: connection closed")
                self.forget(peer)

    def drop(self, peer: Peer, why: str) -> None:
        self.dropped += 1
        if self.dropped <= 20 or self.dropped % 1000 == 0:
            self.on_drop(peer.node or peer.address, why, self.dropped)

    def forget(self, peer: Peer) -> None:
        """Close ``peer`` and stop reading it."""
        fd = next((fd for fd, p in self.peers.items() if p is peer), None)
        if fd is not None:
            del self.peers[fd]
        self._paused.discard(peer)
        self._unregister(peer.link)
        peer.close()

    def _interest(self, peer: Peer) -> None:
        """Read the peer unless paused; watch it for writing while output waits."""
        events = (0 if peer.paused else selectors.EVENT_READ) | \
            (selectors.EVENT_WRITE if peer.link.pending else 0)
        fd = peer.link.fileno()
        try:
            if events:
                try:
                    self._selector.modify(fd, events, peer)
                except KeyError:
                    self._selector.register(fd, events, peer)
            else:
                self._selector.unregister(fd)
        except (KeyError, ValueError, OSError):
            pass  # closed meanwhile

    def _unregister(self, link: Framed) -> None:
        try:
            self._selector.unregister(link.fileno())
        except (KeyError, ValueError, OSError):
            pass  # not registered (paused), or closed

    # -- sending --------------------------------------------------------------------------
    def broadcast(self, peers: list[Peer], topic: str, value: Any) -> None:
        """One message to each of ``peers``: its body made once, sealed in each session."""
        body = body_of(topic, value)
        for peer in peers:
            if peer.send_body(body):
                self._interest(peer)
            elif peer.failed:
                self.drop(peer, f"{peer.failed}: connection closed")

    def send(self, peer: Peer, topic: str, value: Any) -> None:
        self.broadcast([peer], topic, value)

    def close(self) -> None:
        for pending in list(self._pending.values()):
            pending.link.close()
        for peer in list(self.peers.values()):
            peer.close()
        self._selector.close()
        self.listener.close()
