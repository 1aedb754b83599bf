"""A peer that holds the job's secret and tries to stall node 0: ``node_trickler.py PORT MODE
NAME`` (the secret on stdin), standard library only, under any uid.

It passes the channel's handshake (written here from the protocol, not imported) and says
hello as node NAME, then ``trickle``: begins a frame of 1,000 bytes and sends one byte of it
every 0.3 s; or ``deaf``: reads nothing node 0 sends.  It stops when node 0 closes it (or
after 40 s) and prints as JSON how long that took and how many bytes it trickled."""

import hashlib
import hmac
import json
import os
import select
import socket
import struct
import sys
import time

PROTOCOL = b"ddpdoctor-nodes/2 "
CHALLENGE, ANSWER, PROOF = PROTOCOL + b"challenge ", PROTOCOL + b"answer ", PROTOCOL + b"proof "


def mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def read_frame(sock: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    size, body = struct.unpack(">I", head)[0], b""
    while len(body) < size:
        body += sock.recv(size - len(body))
    return body


def closed(sock: socket.socket) -> bool:
    poller = select.poll()
    poller.register(sock, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(0))


def main() -> None:
    port, mode, name = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    key = mac(sys.stdin.readline().strip().encode(), b"ddpdoctor-node-channel")
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if mode == "deaf":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    theirs = read_frame(sock)[len(CHALLENGE):]
    mine = os.urandom(32)
    sock.sendall(frame(ANSWER + mine + mac(key, b"node", theirs, mine)))
    assert read_frame(sock) == PROOF + mac(key, b"leader", theirs, mine), "no proof"
    session = mac(key, b"session", theirs, mine)
    body = b'hello\n{"node":"' + name.encode() + b'"}'
    counter = struct.pack(">Q", 1)
    sock.sendall(frame(counter + mac(session, b"n>0", counter, body) + body))
    started, sent = time.monotonic(), 0
    if mode == "trickle":
        sock.sendall(struct.pack(">I", 1000))
    while time.monotonic() - started < 40:
        try:
            if mode == "trickle":
                sock.send(b"x")
                sent += 1
            elif closed(sock):
                break
        except OSError:
            break
        time.sleep(0.3)
    print(json.dumps({"closed_after_s": round(time.monotonic() - started, 2), "sent": sent}))


main()
