"""Messages only the job's supervisors can write: HMAC-SHA256 with the job's secret, bound to a session.

The nodes' channel (node_channel) lets in only peers that answer its challenge with the
secret; on top of that every message is sealed, so that bytes injected into or replayed on
an authenticated connection change nothing: one header line, then the body (JSON), the
header carrying who sent it (``from``: "0" for node 0, else the node's
name), node 0's session (a random name it draws at start), a counter that only grows on
the sender, the sender's clock, and the HMAC-SHA256 of the store key, those fields and
the body under the job's secret (``DDPDOCTOR_STORE_SECRET``, the same on every node).  A
reader drops, and says why, whatever is too big, malformed, signed with another secret or
for another key, from another session, or older than what that sender already said under
that topic (a replay).  A following node learns node 0's session from a beat of node 0
signed with the secret and stamped within ``FRESH_S`` of its own clock; from then on
it signs its own messages with that session, so a message recorded in an earlier job
(even one with the same secret) is refused by both ends.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

SECRET_ENV = "DDPDOCTOR_STORE_SECRET"
MIN_SECRET_CHARS = 16
MAX_VALUE_BYTES = (8 << 20) - (64 << 10)  # one sealed message: under the channel's 8 MiB
MAX_HEADER_BYTES = 512
MAX_NAME_CHARS = 128
FRESH_S = 300.0  # node 0's session is adopted from a beat at most this far from our clock
MAX_TRACKED_KEYS = 16384  # (sender, key) counters kept for replay checks


class Refused(ValueError):
    """A message that is not a sealed message of this job (why: the text)."""


def store_secret() -> str | None:
    """The job's secret from ``DDPDOCTOR_STORE_SECRET`` (None when unset or blank)."""
    value = os.environ.get(SECRET_ENV, "").strip()
    return value or None


def secret_problem(secret: str, source: str = SECRET_ENV) -> str:
    """Why ``secret`` cannot be used ("" when it can)."""
    if len(secret) < MIN_SECRET_CHARS:
        return f"{source} is shorter than {MIN_SECRET_CHARS} characters"
    return ""


def make_secret_hint() -> str:
    """How to make a secret, as a shell line to run on every node."""
    return (f"export {SECRET_ENV}=$(python -c 'import secrets;print(secrets.token_hex(32))') "
            "with the same value on every node")


def new_session() -> str:
    return secrets.token_hex(12)


@dataclass(frozen=True)
class Header:
    """The first line of a sealed value."""

    sender: str
    session: str
    counter: int
    t_ns: int
    mac: str

    @classmethod
    def parse(cls, line: bytes) -> "Header":
        """Field by field, each of its type; raises Refused."""
        if len(line) > MAX_HEADER_BYTES:
            raise Refused("header too long")
        try:
            raw = json.loads(line)
        except ValueError:
            raise Refused("not a sealed message") from None
        if not isinstance(raw, dict):
            raise Refused("not a sealed message")
        sender, session = raw.get("from"), raw.get("session")
        counter, t_ns, mac = raw.get("n"), raw.get("t"), raw.get("mac")
        if not (isinstance(sender, str) and 0 < len(sender) <= MAX_NAME_CHARS and
                isinstance(session, str) and len(session) <= MAX_NAME_CHARS and
                type(counter) is int and counter >= 0 and type(t_ns) is int and
                isinstance(mac, str) and len(mac) == 64):
            raise Refused("malformed header")
        return cls(sender, session, counter, t_ns, mac)


def _mac(secret: bytes, key: str, sender: str, session: str, counter: int, t_ns: int,
         body: bytes) -> str:
    head = json.dumps([key, sender, session, counter, t_ns]).encode()
    return hmac.new(secret, head + b"\n" + body, hashlib.sha256).hexdigest()


class Seal:
    """One supervisor's signing and checking of the nodes' messages."""

    def __init__(self, secret: str, sender: str, session: str | None):
        self.secret = secret.encode()
        self.sender = sender
        self.session = session  # node 0's; a follower learns it (adopt)
        self._counter = time.time_ns()  # grows across restarts of a sender too
        self._seen: OrderedDict[tuple[str, str], int] = OrderedDict()

    def seal(self, key: str, value: Any) -> bytes:
        """The sealed bytes of ``value`` under ``key``."""
        self._counter += 1
        body = json.dumps(value, separators=(",", ":")).encode()
        t_ns = time.time_ns()
        session = self.session or ""
        head = {"from": self.sender, "session": session, "n": self._counter, "t": t_ns,
                "mac": _mac(self.secret, key, self.sender, session, self._counter, t_ns, body)}
        return json.dumps(head, separators=(",", ":")).encode() + b"\n" + body

    def open(self, key: str, raw: bytes, session: str | None = None,
             once: bool = False) -> tuple[Header, Any]:
        """The header and body of a sealed value read under ``key``; raises Refused.
        ``session``: the one the value must carry (default: ours; None while unknown).
        ``once``: each message is read once (a queue's): the same counter again is a
        replay; else (a key read again and again) only an older one is."""
        if len(raw) > MAX_VALUE_BYTES:
            raise Refused(f"oversized ({len(raw)} bytes)")
        line, sep, body = bytes(raw).partition(b"\n")
        if not sep:
            raise Refused("not a sealed message")
        head = Header.parse(line)
        want_mac = _mac(self.secret, key, head.sender, head.session, head.counter, head.t_ns,
                        body)
        if not hmac.compare_digest(want_mac, head.mac):
            raise Refused("bad signature (no secret, another secret, or another key)")
        expected = self.session if session is None else session
        if expected is not None and head.session != expected:
            raise Refused(f"another session ({head.session[:8] or 'none'})")
        seen = self._seen.get((head.sender, key))
        if seen is not None and (head.counter < seen or once and head.counter == seen):
            raise Refused("replayed (older than what its sender already said)")
        try:
            value = json.loads(body)
        except ValueError:
            raise Refused("body is not JSON") from None
        self._seen[(head.sender, key)] = head.counter
        self._seen.move_to_end((head.sender, key))
        while len(self._seen) > MAX_TRACKED_KEYS:
            self._seen.popitem(last=False)
        return head, value

    @staticmethod
    def fresh_ns(t_ns: int) -> bool:
        """Whether a message stamped ``t_ns`` was stamped within ``FRESH_S`` of our clock."""
        return abs(time.time_ns() - t_ns) <= FRESH_S * 1e9
