"""Fuzz the nodes' channel's readers: framing, the handshake, a sealed frame's body, a node's copy.

    nice -n 10 python bench/fuzz/fuzz_frames.py bench/fuzz/corpus/frames -max_total_time=600

An input's first byte chooses what it is fed to: the framing of a connection (bytes as a
socket hands them, through a socket pair), node 0's and a node's side of the handshake, a
frame opened in a session (most fail the seal: as they must), or the body of a frame from
a node that holds the secret (the topic, the JSON, then what node 0 makes of it: a report
parsed field by field, its copy written into a mirror dir).  A refusal is the channel's own
(Refused, ChannelError) or a problem line; nothing else may be raised, and a mirror never
grows past its caps nor a file outside it.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

import atheris

import common  # noqa: F401 - puts the repository on sys.path

with atheris.instrument_imports(include=["ddpdoctor"]):
    from ddpdoctor.supervisor.node_auth import (LeaderHandshake, NodeHandshake, Refused,
                                                Session, parse_body)
    from ddpdoctor.supervisor.node_frames import ChannelError, Framed
    from ddpdoctor.supervisor.node_messages import (FinalWord, NodeReport, NodeVerdict,
                                                    StackAsk)
    from ddpdoctor.trace.sync import MAX_MIRROR_ENTRIES, apply_delta

KEY = b"k" * 32
WORK = Path(tempfile.mkdtemp(prefix="fuzz-frames-", dir="/dev/shm"))


def _framing(data: bytes) -> None:
    a, b = socket.socketpair()
    try:
        link = Framed(a)
        b.sendall(data[:1 << 16])
        b.shutdown(socket.SHUT_WR)
        for _ in range(4):
            try:
                for frame in link.read(0.0):
                    assert len(frame) <= 8 << 20
            except ChannelError:
                return
    finally:
        a.close()
        b.close()


def _handshake(data: bytes) -> None:
    try:
        LeaderHandshake(KEY).answer(data)
    except Refused:
        pass
    node = NodeHandshake(KEY)
    try:
        node.answer(data)
        node.session(data)
    except Refused:
        pass


def _sealed(data: bytes) -> None:
    try:
        Session(KEY, leader=True).open(data)
    except Refused:
        pass


def _body(data: bytes) -> None:
    try:
        topic, value = parse_body(data)
    except Refused:
        return
    common.assert_safe_text(NodeVerdict.parse(value) and NodeVerdict.parse(value).as_dict())
    StackAsk.parse(value)
    FinalWord.parse(value)
    if topic == "report" and isinstance(value, dict):
        report = NodeReport.parse(value)
        mirror = WORK / "mirror"
        problems = apply_delta(mirror, report.delta if report.delta is not None else value)
        assert all("\n" not in p for p in problems), problems
        for folder in (mirror, *(mirror / d for d in ("traces", "stacks", "flight_recorder"))):
            if folder.is_dir():
                assert len(os.listdir(folder)) <= MAX_MIRROR_ENTRIES + 8
        assert sorted(os.listdir(WORK)) == ["mirror"], os.listdir(WORK)
        shutil.rmtree(mirror)


FEEDS = (_framing, _handshake, _sealed, _body)


def one_input(data: bytes) -> None:
    if not data:
        return
    FEEDS[data[0] % len(FEEDS)](data[1:])


if __name__ == "__main__":
    atheris.Setup(common.argv(), one_input)
    atheris.Fuzz()
