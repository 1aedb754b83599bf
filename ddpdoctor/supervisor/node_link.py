"""The nodes' channel, a following node's end: the handshake with node 0, then frames sealed in that session.

``connect`` dials node 0 until it listens and proves the job's secret (node_auth's
handshake over both ends' nonces), or says ``Unproven`` when what answers never does
(another secret on node 0, or another program holding its port).  ``NodeLink`` then sends
and receives frames (node_frames) sealed in this connection's own session: each read whole
within ``MESSAGE_S``, each sent within ``SEND_S``.
"""

from __future__ import annotations

import errno
import selectors
import socket
import time
from typing import Any, Callable

from ddpdoctor.supervisor.node_auth import NodeHandshake, Refused, Session
from ddpdoctor.supervisor.node_frames import (HANDSHAKE_S, MAX_NODE_OUTBOX, SEND_S,
                                              ChannelError, Framed)


class NodeLink:
    """A following node's connection to node 0, past the handshake: frames sealed in its
    session, each read whole within ``MESSAGE_S``, each sent within ``SEND_S``."""

    def __init__(self, link: Framed, session: Session, early: list[bytes] | None = None):
        self.link = link
        self.session = session
        self._early = list(early or [])  # read with the handshake's last step

    def fileno(self) -> int:
        return self.link.fileno()

    def receive(self, timeout: float) -> list[bytes]:
        """The frames that arrived within ``timeout`` (raw: open each with ``open``);
        raises ChannelError when the connection is gone or past a deadline."""
        if self._early:  # node 0's first frames, read with its proof
            early, self._early = self._early, []
            return early
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


class Silent(Refused):
    """What answers said no word of the handshake (it closed, or its time ran out): a
    node 0 slow or busy, a relay holding the connection, or a squatter that says nothing;
    nothing to conclude from."""


def _wait(sock: socket.socket, timeout: float, write: bool) -> bool:
    with selectors.DefaultSelector() as sel:
        sel.register(sock, selectors.EVENT_WRITE if write else selectors.EVENT_READ)
        return bool(sel.select(max(0.0, timeout)))


def _next_frames(link: Framed, deadline: float) -> list[bytes]:
    """The frames of the next read that completes one (all of them: a peer quick to
    follow up sends its next frames in the same read)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Silent("no word within the handshake's time")
        if _wait(link.sock, min(left, 0.5), write=False):
            try:
                frames = link.read(time.monotonic(), 4096)
            except ChannelError as e:
                if e.errno == errno.EMSGSIZE:  # bytes of another protocol, read as a length
                    raise Refused("it speaks another protocol") from None
                raise Silent("it closed the connection during the handshake") from None
            if frames:
                return frames


def handshake(sock: socket.socket, key: bytes, timeout_s: float = HANDSHAKE_S) -> NodeLink:
    """This node's side of the handshake on a connected ``sock``: the link to node 0, or
    Refused when what answers speaks another protocol or fails to prove the secret, Silent
    when it says nothing of the handshake (ChannelError: the socket failed)."""
    link = Framed(sock, MAX_NODE_OUTBOX)
    mine = NodeHandshake(key)
    deadline = time.monotonic() + timeout_s
    try:
        link.queue(mine.answer(_next_frames(link, deadline)[0]))  # node 0 waits for it
        while link.flush(time.monotonic()):
            if time.monotonic() > deadline:
                raise Silent("it reads no answer")
            _wait(sock, 0.2, write=True)
        try:
            proof, *early = _next_frames(link, deadline)
        except Silent:  # a node 0 that challenged, then closed at the answer: not ours
            raise Refused("it took this node's answer for no proof of the secret") from None
        session = mine.session(proof)
    except BaseException:
        link.close()
        raise
    return NodeLink(link, session, early)  # a first beat read with the proof is kept


def connect(host: str, port: int, key: bytes, timeout_s: float,
            stop: Callable[[], bool] | None = None) -> NodeLink:
    """A following node's link to node 0, both ends proven; retried until node 0 listens
    and proves the secret, or ``timeout_s`` passes.  Raises Unproven when what answered
    never proved the secret (a node 0 with another secret, or another program holding its
    port), else OSError (nothing listens, or what does never says a word of the handshake:
    a node 0 slow to come up is waited for)."""
    deadline = time.monotonic() + timeout_s
    unproven = silent = ""
    while True:
        left = deadline - time.monotonic()
        try:
            sock = socket.create_connection((host, port), timeout=max(0.1, min(5.0, left)))
            return handshake(sock, key, min(HANDSHAKE_S, max(0.5, left)))
        except Silent as e:
            silent = str(e)
        except Refused as e:
            unproven = str(e)
        except OSError:
            if left <= 0 and not unproven and not silent:
                raise
        if time.monotonic() > deadline or (stop is not None and stop()):
            if unproven:
                raise Unproven(f"{host}:{port} answers, but does not prove this job's "
                               f"secret ({unproven}): another secret on node 0, or another "
                               "program holding the nodes' port")
            raise OSError(errno.ETIMEDOUT, f"no node 0 at {host}:{port}" +
                          (f" (what answers there: {silent})" if silent else ""))
        time.sleep(0.2)
