"""The nodes' channel: node 0 listens, the other nodes connect, each proves the secret first.

Built on the standard library's ``multiprocessing.connection``: each connection is
authenticated both ways by its HMAC challenge (``deliver_challenge``/``answer_challenge``)
under a key drawn from the job's secret before any message is read, then carries
length-prefixed byte strings (``send_bytes``/``recv_bytes``, never pickle), each at most
``MAX_MESSAGE_BYTES``: a longer one closes the connection unread.  A message is one line
naming its topic, then a value sealed with the secret (node_auth): bytes injected into an
authenticated connection, or replayed on it, are refused.

Node 0's side (``Hub``) keeps everything bounded: at most ``MAX_PENDING`` connections in
their challenge at once (the oldest is dropped for a new one, and each has
``HANDSHAKE_S`` to answer), at most ``MAX_PEERS`` authenticated ones, and per peer a quota
of messages and bytes per second: a peer over it is not read until its quota refills (its
sends wait: TCP's own flow control), so no peer can make node 0 spend more than its share.
An unauthenticated peer is sent the challenge and nothing else; there is nothing to read,
pop, set or delete.  The traffic is not encrypted: what the nodes send (trace records,
stacks, logs) can be read on the network path (docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import selectors
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import (AuthenticationError, Connection, answer_challenge,
                                        deliver_challenge)
from typing import Any, Callable

from ddpdoctor.supervisor.node_auth import Refused, Seal

MAX_MESSAGE_BYTES = 8 << 20
HANDSHAKE_S = 5.0  # a connecting peer answers the challenge within this
IO_TIMEOUT_S = 10.0  # one message read or written (a stalled peer is dropped)
MAX_PENDING = 64  # connections in their challenge at once
MAX_PEERS = 8192  # authenticated connections
MSGS_PER_S = 64.0  # a peer's quota (a follower sends 4 a second)
MSG_BURST = 256.0
BYTES_PER_S = float(64 << 20)
BYTE_BURST = float(2 * MAX_MESSAGE_BYTES)
MAX_TOPIC = 32
TOPICS = frozenset({"hello", "report", "beat", "ask", "verdict", "final"})


def channel_key(secret: str) -> bytes:
    """The challenge's key: drawn from the secret, distinct from the messages' seal key."""
    return hmac.new(secret.encode(), b"ddpdoctor-node-channel", hashlib.sha256).digest()


def _io_timeouts(sock: socket.socket, seconds: float) -> None:
    """Blocking reads and writes of ``sock`` fail after ``seconds`` without progress."""
    tv = struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)


def frame(topic: str, sealed: bytes) -> bytes:
    return topic.encode() + b"\n" + sealed


@dataclass(frozen=True)
class Received:
    """A sealed message read from a peer: its topic, sender, stamp and value."""

    topic: str
    sender: str
    t_ns: int
    session: str
    value: Any


def open_frame(seal: Seal, raw: bytes, session: str | None = None) -> Received:
    """The topic and sealed value of one message; raises Refused."""
    topic_b, sep, sealed = raw.partition(b"\n")
    topic = topic_b.decode("ascii", "replace")
    if not sep or len(topic_b) > MAX_TOPIC or topic not in TOPICS:
        raise Refused("unknown topic")
    head, value = seal.open(topic, sealed, session, once=True)
    return Received(topic, head.sender, head.t_ns, head.session, value)


class Peer:
    """One authenticated connection: its node (once it said hello), a send lock, quotas."""

    def __init__(self, conn: Connection, address: str):
        self.conn = conn
        self.address = address
        self.node: str | None = None
        self.closed = False
        self.paused = False  # over its quota: not read until it refills
        self._send_lock = threading.Lock()
        self._msgs, self._bytes = MSG_BURST, BYTE_BURST
        self._refilled = time.monotonic()

    def send(self, data: bytes) -> bool:
        """Send one message; False (and the peer closed) when it cannot be sent."""
        with self._send_lock:
            if self.closed:
                return False
            try:
                self.conn.send_bytes(data)
                return True
            except (OSError, ValueError):
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
        self.closed = True
        try:
            self.conn.close()
        except OSError:
            pass  # already gone


class Hub:
    """Node 0's end: a listening socket, the challenge of every newcomer (in threads, a
    bounded number), and the authenticated peers read from one selector."""

    def __init__(self, listener: socket.socket, seal: Seal,
                 on_drop: Callable[[str, str, int], None]):
        self.listener = listener
        self.seal = seal
        self.key = channel_key(seal.secret.decode())
        self.on_drop = on_drop
        self.dropped = 0
        self.refused_connections = 0  # failed the challenge, or dropped for newer ones
        self.peers: dict[int, Peer] = {}  # fd -> peer
        self._paused: set[Peer] = set()
        self._selector = selectors.DefaultSelector()
        self._pending: deque[socket.socket] = deque()
        self._ready: deque[Peer] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        listener.settimeout(0.2)
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True,
                                          name="ddpdoctor-nodes-accept")
        self._acceptor.start()

    # -- newcomers ------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                sock, addr = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.05)  # out of descriptors: the backlog waits
                continue
            sock.settimeout(None)
            _io_timeouts(sock, HANDSHAKE_S)
            with self._lock:
                while len(self._pending) >= MAX_PENDING:
                    self._evict(self._pending.popleft())
                self._pending.append(sock)
            threading.Thread(target=self._challenge, args=(sock, addr), daemon=True,
                             name="ddpdoctor-nodes-challenge").start()

    def _evict(self, sock: socket.socket) -> None:
        self.refused_connections += 1
        try:
            sock.shutdown(socket.SHUT_RDWR)  # its challenge thread wakes and closes it
        except OSError:
            pass  # closed meanwhile

    def _challenge(self, sock: socket.socket, addr: Any) -> None:
        conn = Connection(sock.fileno())
        try:
            deliver_challenge(conn, self.key)  # the peer proves the secret: nothing else
            answer_challenge(conn, self.key)  # is read before; then node 0 proves it
            ok = True
        except (AuthenticationError, OSError, EOFError, AssertionError, ValueError):
            ok = False
        with self._lock:
            try:
                self._pending.remove(sock)
            except ValueError:
                ok = False  # evicted meanwhile
            if ok and len(self.peers) + len(self._ready) < MAX_PEERS:
                _io_timeouts(sock, IO_TIMEOUT_S)
                conn._handle = sock.detach()  # type: ignore[attr-defined]  # the peer owns it now
                host = addr[0] if isinstance(addr, tuple) and addr else str(addr)
                self._ready.append(Peer(conn, str(host)))
                return
        self.refused_connections += 1
        conn._handle = None  # type: ignore[attr-defined]  # the socket closes it
        sock.close()

    # -- reading --------------------------------------------------------------------------
    def adopt(self) -> list[Peer]:
        """The peers authenticated since the last call (now read by ``receive``); peers
        closed meanwhile are forgotten first (their descriptor numbers come back)."""
        for peer in [p for p in self.peers.values() if p.closed]:
            self.forget(peer)
            self._paused.discard(peer)
        with self._lock:
            new, self._ready = list(self._ready), deque()
        for peer in new:
            fd = peer.conn.fileno()
            self.peers[fd] = peer
            self._selector.register(fd, selectors.EVENT_READ, peer)
        return new

    def refill(self) -> None:
        """Peers paused for their quota that may be read again."""
        for peer in list(self._paused):
            if peer.closed:
                self._paused.discard(peer)
            elif peer.refill():
                peer.paused = False
                self._paused.discard(peer)
                self._selector.register(peer.conn.fileno(), selectors.EVENT_READ, peer)

    def receive(self, timeout: float) -> list[tuple[Peer, Received]]:
        """The sealed messages that arrived within ``timeout`` (what is not sealed for this
        job is dropped and told); closed peers are forgotten."""
        out = []
        for key, _ in self._selector.select(timeout):
            peer: Peer = key.data
            got = self._read(peer)
            if got is not None:
                out.append((peer, got))
        return out

    def _read(self, peer: Peer) -> Received | None:
        try:
            raw = peer.conn.recv_bytes(MAX_MESSAGE_BYTES)
        except (OSError, EOFError) as e:  # gone, stalled, or too long: closed unread
            if isinstance(e, OSError) and "length" in str(e):
                self.drop(peer, "oversized message (connection closed)")
            self.forget(peer)
            return None
        peer.charge(len(raw))
        if not peer.refill():
            peer.paused = True
            self._paused.add(peer)
            self._selector.unregister(peer.conn.fileno())
        try:
            return open_frame(self.seal, raw)
        except Refused as e:
            self.drop(peer, str(e))
            return None

    def drop(self, peer: Peer, why: str) -> None:
        self.dropped += 1
        if self.dropped <= 20 or self.dropped % 1000 == 0:
            self.on_drop(peer.node or peer.address, why, self.dropped)

    def forget(self, peer: Peer) -> None:
        """Close ``peer`` and stop reading it."""
        for fd in [fd for fd, p in self.peers.items() if p is peer]:
            del self.peers[fd]
            try:
                self._selector.unregister(fd)
            except (KeyError, ValueError):
                pass  # paused: not registered
        peer.close()

    # -- sending --------------------------------------------------------------------------
    def sealed(self, topic: str, value: Any) -> bytes:
        return frame(topic, self.seal.seal(topic, value))

    def close(self) -> None:
        self._stop.set()
        self._acceptor.join(2.0)
        self.listener.close()
        with self._lock:
            for sock in self._pending:
                self._evict(sock)
        for peer in list(self.peers.values()) + list(self._ready):
            peer.close()
        self._selector.close()


def connect(host: str, port: int, secret: str, timeout_s: float,
            stop: threading.Event | None = None) -> Connection:
    """A follower's connection to node 0, authenticated both ways; retried until node 0
    listens or ``timeout_s`` passes.  Raises OSError, or AuthenticationError when node 0
    does not take this node's secret (then at once: retrying changes nothing)."""
    key = channel_key(secret)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=min(5.0, timeout_s))
        except OSError:
            if time.monotonic() > deadline or (stop is not None and stop.is_set()):
                raise
            time.sleep(0.2)
            continue
        sock.settimeout(None)
        _io_timeouts(sock, HANDSHAKE_S)
        conn = Connection(sock.detach())
        try:
            answer_challenge(conn, key)
            deliver_challenge(conn, key)
        except AuthenticationError:
            conn.close()
            raise AuthenticationError("node 0 does not share this node's secret") from None
        except (OSError, EOFError, AssertionError) as e:
            conn.close()  # a stranger's socket, or node 0 busy: try again
            if time.monotonic() > deadline or (stop is not None and stop.is_set()):
                raise OSError(f"no answer to the channel's challenge ({e})") from None
            time.sleep(0.2)
            continue
        fd_sock = socket.socket(fileno=conn.fileno())  # the timeouts of every later message
        try:
            _io_timeouts(fd_sock, IO_TIMEOUT_S)
        finally:
            fd_sock.detach()
        return conn
