"""A stranger on the network: without the secret, it does to node 0's channel port what it can
until its stdin closes, then prints as JSON what node 0 ever sent it.

Each round it opens connections that send junk, a frame claiming 2 GiB, a forged "stop"
verdict and a node's report written as if the channel had no challenge, a wrong answer to
the challenge, and (``flood``) keeps up to ``HOLD`` connections open doing nothing, writing
``JUNK`` bytes into each.  Run with the standard library only (``python -I -S``), under any
uid: ``node_stranger.py PORT [flood]``."""

import hashlib
import hmac
import json
import os
import select
import socket
import struct
import sys

HOLD = 400
JUNK = 64 << 10
CHALLENGE = b"ddpdoctor-nodes/2 challenge "
ANSWER = b"ddpdoctor-nodes/2 answer "


def frame(data: bytes) -> bytes:
    return struct.pack("!i", len(data)) + data


def read_some(sock: socket.socket, seconds: float = 0.2) -> bytes:
    sock.settimeout(seconds)
    got = b""
    try:
        while len(got) < 1 << 16:
            chunk = sock.recv(4096)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    return got


def main() -> None:
    port, flood = int(sys.argv[1]), "flood" in sys.argv[2:]
    forged = json.dumps({"reason": "hang", "message": "forged", "stop": True,
                         "exit_code": 124}).encode()
    attempts = [b"GET / HTTP/1.0\r\n\r\n" * 100, struct.pack("!i", 0x7FFFFFF0) + b"x" * 4096,
                frame(b"verdict\n" + forged),
                frame(b"\0" * 7 + b"\1" + b"0" * 32 + b'report\n{"done":true,"exit_code":9}')]
    got: list[str] = []
    held: list[socket.socket] = []
    rounds = 0
    while not select.select([sys.stdin], [], [], 0.05)[0]:
        rounds += 1
        for data in attempts:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    s.sendall(data)
                    got.append(read_some(s).hex())
            except OSError:
                pass
        try:  # the challenge, answered with a key of its own
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                first = read_some(s)
                nonce = first[4 + len(CHALLENGE):]
                mine = os.urandom(32)
                s.sendall(frame(ANSWER + mine + hmac.new(os.urandom(32), nonce + mine,
                                                         hashlib.sha256).digest()))
                got.append((first + read_some(s)).hex())
        except OSError:
            pass
        while flood and len(held) < HOLD:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                s.setblocking(False)
                try:
                    s.send(b"\0" * JUNK)
                except OSError:
                    pass
                held.append(s)
            except OSError:
                break
    for s in held:
        got.append(read_some(s, 0.0).hex())
        s.close()
    print(json.dumps({"rounds": rounds, "held": len(held), "got": got}))


main()
