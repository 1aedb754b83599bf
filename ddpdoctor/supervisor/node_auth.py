"""The nodes' handshake and the session it opens: both ends prove the secret over fresh nonces, every frame is sealed in that session.

Every connection of the nodes' channel starts with a mutual challenge under a key drawn
from the job's secret (``DDPDOCTOR_STORE_SECRET``, the same on every node): node 0 sends a
random nonce, the connecting node answers with its own nonce and an HMAC over both, node 0
proves the secret back with an HMAC over both.  Neither end reads a message before the
other proved the secret.  The two nonces then make this connection's own session key
(``Session``), and every later frame is sealed under it: HMAC-SHA256 over the direction,
a counter and the body, the counter one more than the frame before in that direction.  A
frame recorded on another connection (an earlier job's, even with the same secret, or this
job's other nodes'), injected, replayed, reordered, dropped or sent back to its sender is
refused, and the connection with it: a relay on the network path can delay or cut the
channel, never speak in it.  The traffic is not encrypted (docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import struct
from typing import Any

from ddpdoctor.rundir.bounded import BadInput, load_json

SECRET_ENV = "DDPDOCTOR_STORE_SECRET"
MIN_SECRET_CHARS = 16
PROTOCOL = b"ddpdoctor-nodes/2 "
CHALLENGE = PROTOCOL + b"challenge "
ANSWER = PROTOCOL + b"answer "
PROOF = PROTOCOL + b"proof "
NONCE_BYTES = 32
MAC_BYTES = 32
_COUNTER = struct.Struct(">Q")
SEAL_BYTES = _COUNTER.size + MAC_BYTES
MAX_TOPIC = 32
TOPICS = frozenset({"hello", "report", "beat", "ask", "verdict", "final"})
TO_NODES, TO_NODE_0 = b"0>n", b"n>0"  # the two directions of a connection


class Refused(ValueError):
    """A frame or a handshake step that is not this connection's (why: the text)."""


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


def channel_key(secret: str) -> bytes:
    """The handshake's key, drawn from the secret."""
    return hmac.new(secret.encode(), b"ddpdoctor-node-channel", hashlib.sha256).digest()


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


class Session:
    """One authenticated connection's sealing: its own key, a counter per direction."""

    def __init__(self, key: bytes, leader: bool):
        self._key = key
        self._out, self._in = (TO_NODES, TO_NODE_0) if leader else (TO_NODE_0, TO_NODES)
        self._sent = 0
        self._read = 0

    def seal(self, topic: str, value: Any) -> bytes:
        """The frame of ``value`` under ``topic``: counter, MAC, then ``topic\\nJSON``."""
        return self.seal_body(body_of(topic, value))

    def seal_body(self, body: bytes) -> bytes:
        """The frame of a body made by ``body_of`` (made once for many sessions)."""
        self._sent += 1
        counter = _COUNTER.pack(self._sent)
        return counter + _mac(self._key, self._out, counter, body) + body

    def open(self, frame: bytes) -> tuple[str, Any]:
        """The topic and value of the next frame from the other end; raises Refused."""
        if len(frame) < SEAL_BYTES:
            raise Refused("a frame too short to be sealed")
        counter, mac, body = frame[:8], frame[8:SEAL_BYTES], frame[SEAL_BYTES:]
        if not hmac.compare_digest(_mac(self._key, self._in, counter, body), mac):
            raise Refused("bad seal (not sealed in this connection's session)")
        n = _COUNTER.unpack(counter)[0]
        if n != self._read + 1:
            raise Refused(f"out of order (frame {n} after {self._read}): replayed or dropped")
        self._read = n
        return parse_body(body)


def body_of(topic: str, value: Any) -> bytes:
    return topic.encode() + b"\n" + json.dumps(value, separators=(",", ":")).encode()


def parse_body(body: bytes) -> tuple[str, Any]:
    """A frame's topic and value (its JSON bounded: rundir.bounded); raises Refused."""
    topic_b, sep, raw = body.partition(b"\n")
    topic = topic_b.decode("ascii", "replace")
    if not sep or len(topic_b) > MAX_TOPIC or topic not in TOPICS:
        raise Refused("unknown topic")
    try:
        return topic, load_json(raw, f"a {topic} frame")
    except BadInput as e:
        raise Refused(str(e)) from None


class LeaderHandshake:
    """Node 0's side of one connection's handshake."""

    def __init__(self, key: bytes):
        self.key = key
        self.nonce = secrets.token_bytes(NONCE_BYTES)

    def challenge(self) -> bytes:
        return CHALLENGE + self.nonce

    def answer(self, frame: bytes) -> tuple[bytes, Session]:
        """The proof to send back and the session, from the node's answer; Refused when
        it does not prove the secret."""
        if not frame.startswith(ANSWER) or len(frame) != len(ANSWER) + NONCE_BYTES + MAC_BYTES:
            raise Refused("no answer to the challenge")
        theirs = frame[len(ANSWER):len(ANSWER) + NONCE_BYTES]
        if not hmac.compare_digest(_mac(self.key, b"node", self.nonce, theirs),
                                   frame[-MAC_BYTES:]):
            raise Refused("a wrong answer to the challenge (no secret, or another)")
        proof = PROOF + _mac(self.key, b"leader", self.nonce, theirs)
        return proof, Session(_mac(self.key, b"session", self.nonce, theirs), leader=True)


class NodeHandshake:
    """A connecting node's side of the handshake."""

    def __init__(self, key: bytes):
        self.key = key
        self.nonce = secrets.token_bytes(NONCE_BYTES)
        self._theirs = b""

    def answer(self, challenge: bytes) -> bytes:
        """The answer to node 0's challenge; Refused when it is none of this protocol's."""
        if not challenge.startswith(CHALLENGE) or \
                len(challenge) != len(CHALLENGE) + NONCE_BYTES:
            raise Refused("what answers is not a ddpdoctor node 0 (no challenge)")
        self._theirs = challenge[len(CHALLENGE):]
        return ANSWER + self.nonce + _mac(self.key, b"node", self._theirs, self.nonce)

    def session(self, proof: bytes) -> Session:
        """The session, once node 0 proved the secret; Refused when it did not."""
        want = PROOF + _mac(self.key, b"leader", self._theirs, self.nonce)
        if not hmac.compare_digest(want, proof):
            raise Refused("node 0 did not prove the secret")
        return Session(_mac(self.key, b"session", self._theirs, self.nonce), leader=False)
