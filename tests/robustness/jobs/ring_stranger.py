"""A stranger on the ranks' host: connects to every ring-link socket of the pids in argv it sees
in /proc/net/unix (as soon as it appears), ``FLOOD`` times (a flood that would fill its
backlog), tries to take a descriptor through the first connection and to open the ranks'
memfds through /proc, until its stdin closes; prints what it got as JSON.

Run with the standard library only (``python -I -S``), under any uid."""

import json
import os
import select
import socket
import sys

PREFIX = "ddpdoctor-ring-"
FLOOD = 32


def ring_sockets(pids: set[int]) -> list[str]:
    with open("/proc/net/unix") as f:
        names = [line.split()[7] for line in f.read().splitlines()[1:] if len(line.split()) > 7]
    return [n for n in names if PREFIX in n and _pid(n) in pids]


def _pid(name: str) -> int:
    return int(name[name.index(PREFIX) + len(PREFIX):].split("-")[0], 16)


def _address(name: str) -> str:
    return "\0" + name[1:] if name.startswith("@") else name


def try_memory(pid: int) -> str:
    """What this process can see of ``pid``'s memfds through /proc."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError as e:
        return f"denied: {e.strerror}"
    for fd in fds:
        try:
            if "memfd:ddpdoctor-ring" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                with open(f"/proc/{pid}/fd/{fd}", "rb") as f:
                    return f"read {len(f.read(4096))} bytes"
        except OSError as e:
            return f"denied: {e.strerror}"
    return "no memfd"


def main() -> None:
    pids = {int(a) for a in sys.argv[1:]}
    conns: dict[str, socket.socket] = {}
    held: list[socket.socket] = []
    results: list[dict] = []
    while not select.select([sys.stdin], [], [], 0.002)[0]:
        for name in ring_sockets(pids):
            if name in conns:
                continue
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            entry = {"name": name, "pid": _pid(name), "uid": os.getuid()}
            try:
                s.connect(_address(name))
                entry["connected"] = True
            except OSError as e:
                entry["connected"] = False
                entry["error"] = e.strerror
            conns[name] = s
            flood = []
            for _ in range(FLOOD):
                extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                extra.setblocking(False)
                try:
                    extra.connect(_address(name))
                    flood.append(extra)
                except OSError:
                    extra.close()
            entry["flood_connected"] = len(flood)
            held.extend(flood)
            entry["memory"] = try_memory(entry["pid"])
            results.append(entry)
    for entry in results:
        s = conns[entry["name"]]
        if entry["connected"]:
            s.settimeout(5.0)
            try:
                msg, fds, _flags, _addr = socket.recv_fds(s, 16, 4)
                entry.update(got_bytes=len(msg), got_fds=len(fds))
            except OSError as e:
                entry.update(got_bytes=0, got_fds=0, recv_error=e.strerror or str(e))
        s.close()
    for s in held:
        s.close()
    print(json.dumps(results))


main()
