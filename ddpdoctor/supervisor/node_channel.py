"""The nodes' channel: node 0 listens, the other nodes connect; every connection read without blocking, each message whole within a deadline.

A frame is a 4-byte big-endian length and its bytes, at most ``MAX_MESSAGE_BYTES`` (a longer
one closes the connection unread).  Each connection first runs the handshake of node_auth
(both ends prove the secret over fresh nonces, nothing else is read before), then carries
frames sealed in that connection's own session: one recorded elsewhere or replayed is
refused.  Never pickle.

Node 0's end (``Hub``) reads every connection from one selector, in one thread, and never
waits on one of them: a socket is read when it has bytes, a frame begun must be whole within
``MESSAGE_S`` and a handshake done within ``HANDSHAKE_S`` (a peer that trickles a byte every
few seconds is closed, and meanwhile the others are read as before), and what node 0 sends
waits in a bounded buffer per peer (one that reads nothing for ``SEND_S``, or lets more than
``MAX_OUTBOX`` pile up, is closed).  At most ``MAX_PENDING`` connections are in their
handshake at once (the oldest goes for a new one), at most ``MAX_PEERS`` authenticated, and
each peer has a quota of messages and bytes a second: one over it is not read until its
quota refills (its sends wait: TCP's own flow control).  The traffic is not encrypted: what
the nodes send can be read on the network path (docs/security.md).
"""

from __future__ import annotations

import errno
import selectors
import socket
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from ddpdoctor.supervisor.node_auth import (LeaderHandshake, NodeHandshake, Refused, Session,
                                            body_of)

MAX_MESSAGE_BYTES = 8 << 20
HANDSHAKE_S = 5.0  # a connection proves the secret within this
MESSAGE_S = 10.0  # a frame begun is whole within this
SEND_S = 10.0  # a peer reads what is sent to it within this
MAX_OUTBOX = 4 << 20  # bytes waiting for one peer on node 0
MAX_NODE_OUTBOX = 64 << 20  # bytes waiting on a following node (its copies)
READ_CHUNK = 1 << 20  # bytes read from one socket per turn: the others get theirs
MAX_PENDING = 64  # connections in their handshake at once
MAX_PEERS = 8192  # authenticated connections
MSGS_PER_S = 64.0  # a peer's quota (a follower sends 4 a second)
MSG_BURST = 256.0
BYTES_PER_S = float(64 << 20)
BYTE_BURST = float(2 * MAX_MESSAGE_BYTES)
CHECK_EVERY_S = 0.1  # deadlines are checked this often
_LEN = 4


class ChannelError(OSError):
    """A connection that is closed, or must be: gone, too slow, or too much."""


class Framed:
    """One non-blocking socket's frames: what is read is cut into frames, what is sent
    waits in a bounded buffer; the times a frame began and the sending got stuck are kept
    for the deadlines."""

    def __init__(self, sock: socket.socket, max_outbox: int | None = None):
        sock.setblocking(False)
        self.sock = sock
        self.max_outbox = max_outbox or MAX_OUTBOX
        self._in = bytearray()
        self._out = bytearray()
        self.started: float | None = None  # when the frame being read began
        self.stuck_since: float | None = None  # last progress while output waits
        self.closed = False

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def pending(self) -> bool:
        return bool(self._out)

    def read(self, now: float, budget: int = READ_CHUNK) -> list[bytes]:
        """The frames completed by what the socket holds now (``budget`` bytes at most);
        raises ChannelError when it is closed or sends a frame past the size limit."""
        try:
            data = self.sock.recv(budget)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError as e:
            raise ChannelError(e.errno or errno.EIO, f"read failed ({e.strerror or e})") \
                from None
        if not data:
            raise ChannelError(errno.ECONNRESET, "closed by the other end")
        had_partial = bool(self._in)
        self._in += data
        frames: list[bytes] = []
        while len(self._in) >= _LEN:
            size = int.from_bytes(self._in[:_LEN], "big")
            if size > MAX_MESSAGE_BYTES:
                raise ChannelError(errno.EMSGSIZE, f"a message of {size:,} bytes (more than "
                                   f"{MAX_MESSAGE_BYTES:,}): closed unread")
            if len(self._in) < _LEN + size:
                break
            frames.append(bytes(self._in[_LEN:_LEN + size]))
            del self._in[:_LEN + size]
        if not self._in:
            self.started = None
        elif frames or not had_partial:
            self.started = now
        return frames

    def overdue(self, now: float) -> str:
        """Why this connection is past a deadline ("" when it is not)."""
        if self.started is not None and now - self.started > MESSAGE_S:
            return f"a message not whole after {MESSAGE_S:.0f} s (a peer that trickles)"
        if self._out and self.stuck_since is not None and now - self.stuck_since > SEND_S:
            return f"nothing it was sent read for {SEND_S:.0f} s"
        return ""

    def queue(self, frame: bytes) -> None:
        if len(self._out) + len(frame) + _LEN > self.max_outbox:
            raise ChannelError(errno.ENOBUFS, f"more than {self.max_outbox:,} bytes wait "
                               "unread")
        self._out += len(frame).to_bytes(_LEN, "big") + frame

    def flush(self, now: float) -> bool:
        """Send what the socket takes now; whether some still waits.  Raises ChannelError
        when the connection is gone."""
        sent_any = False
        while self._out:
            try:
                n = self.sock.send(self._out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                raise ChannelError(e.errno or errno.EIO, f"send failed ({e.strerror or e})") \
                    from None
            del self._out[:n]
            sent_any = True
        if not self._out:
            self.stuck_since = None
        elif sent_any or self.stuck_since is None:
            self.stuck_since = now
        return bool(self._out)

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass  # already gone


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


class NodeLink:
    """A following node's connection to node 0, past the handshake: frames sealed in its
    session, each read whole within ``MESSAGE_S``, each sent within ``SEND_S``."""

    def __init__(self, link: Framed, session: Session):
        self.link = link
        self.session = session

    def fileno(self) -> int:
        return self.link.fileno()

    def receive(self, timeout: float) -> list[bytes]:
        """The frames that arrived within ``timeout`` (raw: open each with ``open``);
        raises ChannelError when the connection is gone or past a deadline."""
        ready = _wait(self.link.sock, timeout, write=False)
        now = time.monotonic()
        frames = self.link.read(now) if ready else []
        why = self.link.overdue(now)
        if why:
            raise ChannelError(errno.ETIMEDOUT, why)
        return frames

    def open(self, frame: bytes) -> tuple[str, Any]:
        return self.session.open(frame)

    def send(self, topic: str, value: Any) -> None:
        """Send one sealed message, whole within SEND_S; raises ChannelError."""
        self.link.queue(self.session.seal(topic, value))
        deadline = time.monotonic() + SEND_S
        while self.link.flush(time.monotonic()):
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelError(errno.ETIMEDOUT, f"node 0 read nothing for {SEND_S:.0f} s")
            _wait(self.link.sock, min(left, 0.5), write=True)

    def close(self) -> None:
        self.link.close()


class Unproven(ConnectionError):
    """What answers at node 0's address does not prove the job's secret."""


def _wait(sock: socket.socket, timeout: float, write: bool) -> bool:
    with selectors.DefaultSelector() as sel:
        sel.register(sock, selectors.EVENT_WRITE if write else selectors.EVENT_READ)
        return bool(sel.select(max(0.0, timeout)))


def _next_frame(link: Framed, deadline: float) -> bytes:
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Refused("no word within the handshake's time")
        if _wait(link.sock, min(left, 0.5), write=False):
            try:
                frames = link.read(time.monotonic(), 4096)
            except ChannelError:
                raise Refused("it closed the connection during the handshake") from None
            if frames:
                return frames[0]


def handshake(sock: socket.socket, key: bytes, timeout_s: float = HANDSHAKE_S) -> NodeLink:
    """This node's side of the handshake on a connected ``sock``: the link to node 0, or
    Refused when what answers does not prove the secret (ChannelError: the socket failed)."""
    link = Framed(sock, MAX_NODE_OUTBOX)
    mine = NodeHandshake(key)
    deadline = time.monotonic() + timeout_s
    try:
        link.queue(mine.answer(_next_frame(link, deadline)))
        while link.flush(time.monotonic()):
            if time.monotonic() > deadline:
                raise Refused("it reads no answer")
            _wait(sock, 0.2, write=True)
        session = mine.session(_next_frame(link, deadline))
    except BaseException:
        link.close()
        raise
    return NodeLink(link, session)


def connect(host: str, port: int, key: bytes, timeout_s: float,
            stop: Callable[[], bool] | None = None) -> NodeLink:
    """A following node's link to node 0, both ends proven; retried until node 0 listens
    and proves the secret, or ``timeout_s`` passes.  Raises Unproven when what answered
    never proved the secret (a node 0 with another secret, or another program holding its
    port), else OSError."""
    deadline = time.monotonic() + timeout_s
    unproven = ""
    while True:
        left = deadline - time.monotonic()
        try:
            sock = socket.create_connection((host, port), timeout=max(0.1, min(5.0, left)))
            return handshake(sock, key, min(HANDSHAKE_S, max(0.5, left)))
        except Refused as e:
            unproven = str(e)
        except OSError:
            if left <= 0 and not unproven:
                raise
        if time.monotonic() > deadline or (stop is not None and stop()):
            if unproven:
                raise Unproven(f"{host}:{port} answers, but does not prove this job's "
                               f"secret ({unproven}): another secret on node 0, or another "
                               "program holding the nodes' port")
            raise OSError(errno.ETIMEDOUT, f"no node 0 at {host}:{port}")
        time.sleep(0.2)
