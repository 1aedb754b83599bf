"""Frames on a non-blocking socket: cut from what is read, whole within a deadline, sent from a bounded buffer.

A frame is a 4-byte big-endian length and its bytes, at most ``MAX_MESSAGE_BYTES`` (a longer
one closes the connection unread).  ``Framed`` never blocks: it reads what a socket holds
(``READ_CHUNK`` at most at a turn) and keeps the time a frame began, so that one not whole
within ``MESSAGE_S`` is told (a peer that trickles a byte every few seconds); what it sends
waits in a buffer of ``MAX_OUTBOX`` bytes at most, and a peer that takes nothing of it for
``SEND_S`` is told too.  The nodes' channel (node_channel: node 0's end, node_link: a node's)
closes such a connection.
"""

from __future__ import annotations

import errno
import socket

MAX_MESSAGE_BYTES = 8 << 20
HANDSHAKE_S = 5.0  # a connection proves the secret within this
MESSAGE_S = 10.0  # a frame begun is whole within this
SEND_S = 10.0  # a peer reads what is sent to it within this
MAX_OUTBOX = 4 << 20  # bytes waiting for one peer on node 0
MAX_NODE_OUTBOX = 64 << 20  # bytes waiting on a following node (its copies)
READ_CHUNK = 1 << 20  # bytes read from one socket per turn: the others get theirs
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
