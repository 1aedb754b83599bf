"""The set-up of a group's shared-memory links: trade, verify the peers, seal and pass the memory.

Every rank of the group, at the same ring call: makes a memfd (sealed against resizing)
and a listening unix socket, trades over the group's own send/recv what its neighbours
must know (its pid, uid, host, pid namespace, socket name, slot size: to the right; its
pid: to the left), connects to its left neighbour's socket, and the ranks agree around
the ring that every link works, twice (connected; mapped).

Only the job's own ranks get in.  The socket's name is in the abstract namespace, which
any local user can read in /proc/net/unix, so each end checks the other with
``SO_PEERCRED``: a connection to this rank's socket is accepted only from the right
neighbour's pid (traded above) under this process's uid; any other is closed unanswered,
noted once in the trace, and the rank keeps accepting until its neighbour arrives (the
neighbour is never made to wait, nothing falls back to gloo).  The connecting rank checks
the same of the listener it reached.  The memfd goes out as a read-only descriptor (a
reopen of it with ``O_RDONLY``): the receiver maps it copy-on-write (``ACCESS_COPY``), so
it sees every byte the sender writes and can never write into the sender's memory; it
never writes there at all (its "slot free" goes on the socket), and a write-protected
mapping is avoided only because torch warns once per process about tensors on one.  The
receiver checks the seals and the size before it maps.  Every descriptor is closed on
every path that does not hand it to the links.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import secrets
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

import torch

CONNECT_S = 10.0  # how long a rank waits for its neighbour's connection
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_SETUP_TAG = 1 << 29  # far below the ring's own tags (ring_plan.TAG_BASE)
_BACK_TAG = _SETUP_TAG + 4
_AGREE_TAG = _SETUP_TAG + 8


@dataclass
class Made:
    """The pieces of a rank's two links, once every rank of the group has its own."""

    out_sock: socket.socket  # to the right neighbour (it reads this rank's slots)
    into_sock: socket.socket  # from the left neighbour (this rank reads its slots)
    out_map: mmap.mmap
    in_map: mmap.mmap


@dataclass(frozen=True)
class Outcome:
    """What the set-up gave: the links (None: the ring runs over gloo), why not, and how
    many strangers' connections were refused meanwhile."""

    made: Made | None
    why: str  # "" when the links are made
    refused: list[str]  # "pid P uid U" of each refused connection (at most a few)


@dataclass(frozen=True)
class Identity:
    """What a rank tells its right neighbour about itself (one int64 each)."""

    ok: int
    pid: int
    boot: int
    token: int
    slot_bytes: int
    uid: int
    pid_ns: int

    def values(self) -> list[int]:
        return [self.ok, self.pid, self.boot, self.token, self.slot_bytes, self.uid,
                self.pid_ns]


def _ns_inode(kind: str) -> int:
    try:
        return os.stat(f"/proc/self/ns/{kind}").st_ino
    except OSError:
        return 0


def _boot_id() -> int:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return int(f.read().strip().replace("-", "")[:15], 16)
    except (OSError, ValueError):
        return 0


def _trade(pg: Any, values: list[int], tag: int, to_right: bool = True) -> list[int]:
    """Send ``values`` to the right neighbour and return the left neighbour's (gloo); or
    the other way round (``to_right=False``)."""
    n, r = pg.size(), pg.rank()
    dst, src = ((r + 1) % n, (r - 1) % n) if to_right else ((r - 1) % n, (r + 1) % n)
    mine = torch.tensor(values, dtype=torch.int64)
    theirs = torch.empty_like(mine)
    recv = pg.recv([theirs], src, tag)
    send = pg.send([mine], dst, tag)
    send.wait()
    recv.wait()
    return theirs.tolist()


def _all_agree(pg: Any, ok: bool, tag: int) -> bool:
    """Whether ``ok`` holds on every rank: its AND passed around the ring ``n - 1`` times."""
    flag = int(ok)
    for k in range(pg.size() - 1):
        flag &= _trade(pg, [flag], tag + k)[0]
    return bool(flag)


def socket_name(pid: int, token: int) -> str:
    """A listening socket's name in the abstract namespace (gone with its process)."""
    return f"\0ddpdoctor-ring-{pid:x}-{token:x}"


def peer_cred(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a connected unix socket."""
    pid, uid, _gid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                  _CRED.size))
    return pid, uid


def _mismatch(me: Identity, left: Identity) -> str:
    """Why this rank cannot link with its left neighbour ("" when it can)."""
    if not left.ok:
        return "the left neighbour offers no shared memory"
    if left.boot != me.boot:
        return "peers on another host"
    if left.pid_ns != me.pid_ns:
        return "peers in another pid namespace"
    if left.uid != me.uid:
        return "peers run as another user"
    if left.slot_bytes != me.slot_bytes:
        return "slot size disagreed (DDPDOCTOR_RING_SLOT_BYTES)"
    return ""


class _Parts:
    """The descriptors a set-up holds; ``close`` closes whatever was not handed on."""

    def __init__(self) -> None:
        self.listener: socket.socket | None = None
        self.into: socket.socket | None = None
        self.out: socket.socket | None = None
        self.fd: int | None = None
        self.out_map: mmap.mmap | None = None
        self.in_map: mmap.mmap | None = None

    def offer(self, size: int, name: str) -> None:
        """The listening socket and this rank's sealed memfd, mapped; raises OSError."""
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(name)
        self.listener.listen(8)
        self.fd = os.memfd_create("ddpdoctor-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, size)
        os.posix_fallocate(self.fd, 0, size)  # no room: fail here, never SIGBUS later
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, _SEALS | fcntl.F_SEAL_SEAL)
        self.out_map = mmap.mmap(self.fd, size)

    def connect(self, left: Identity) -> str:
        """Connect to the left neighbour's socket and check who listens there ("" when it
        is the neighbour)."""
        self.into = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.into.settimeout(CONNECT_S)
        self.into.connect(socket_name(left.pid, left.token))
        pid, uid = peer_cred(self.into)
        if pid != left.pid or uid != os.getuid():
            return f"link refused: the socket is held by pid {pid} uid {uid}, not the neighbour"
        return ""

    def accept(self, right_pid: int, refused: list[str]) -> str:
        """Accept the right neighbour's connection, refusing anyone else's, until it comes
        or ``CONNECT_S`` passes ("" once it came)."""
        assert self.listener is not None
        deadline = time.monotonic() + CONNECT_S
        while True:
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                return "link refused: timeout (the neighbour never connected)"
            self.listener.settimeout(left_s)
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError as e:
                return f"link refused: the socket failed ({e.strerror or e})"
            try:
                pid, uid = peer_cred(conn)
            except OSError:
                pid, uid = -1, -1
            if pid == right_pid and uid == os.getuid():
                self.out = conn
                return ""
            conn.close()
            if len(refused) < 8:
                refused.append(f"pid {pid} uid {uid}")

    def pass_memory(self, size: int) -> None:
        """Send the right neighbour a read-only descriptor of this rank's memfd; take the
        left neighbour's and map it; raises OSError or ValueError."""
        assert self.out is not None and self.into is not None and self.fd is not None
        read_only = os.open(f"/proc/self/fd/{self.fd}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            socket.send_fds(self.out, [b"m"], [read_only])
        finally:
            os.close(read_only)
        _msg, fds, _flags, _addr = socket.recv_fds(self.into, 1, 4)
        try:
            if len(fds) != 1:
                raise ValueError(f"{len(fds)} descriptors where one was due")
            seals = fcntl.fcntl(fds[0], fcntl.F_GET_SEALS)
            if seals & _SEALS != _SEALS or os.fstat(fds[0]).st_size != size:
                raise ValueError("the neighbour's memory is not sealed at its size")
            self.in_map = mmap.mmap(fds[0], size, access=mmap.ACCESS_COPY)
        finally:
            for fd in fds:
                os.close(fd)
        self.out.settimeout(None)
        self.into.settimeout(None)

    def hand_on(self) -> Made:
        assert self.out and self.into and self.out_map and self.in_map
        made = Made(self.out, self.into, self.out_map, self.in_map)
        self.out = self.into = self.out_map = self.in_map = None
        return made

    def close(self) -> None:
        for sock in (self.listener, self.into, self.out):
            if sock is not None:
                sock.close()
        for m in (self.out_map, self.in_map):
            if m is not None:
                m.close()
        if self.fd is not None:
            os.close(self.fd)
        self.listener = self.into = self.out = self.out_map = self.in_map = self.fd = None


def setup(pg: Any, wanted: bool, slot_bytes: int, size: int) -> Outcome:
    """Make this rank's links in ``pg``'s ring (a collective: every rank of the group calls
    it at the same ring call); the Outcome says what came of it."""
    token = secrets.randbits(62)
    parts = _Parts()
    refused: list[str] = []
    why = "" if wanted else "DDPDOCTOR_RING_TRANSPORT asks for gloo"
    if not why and not (hasattr(os, "memfd_create") and hasattr(socket, "send_fds")):
        why = "no memfd or descriptor passing on this system"
    try:
        if not why:
            try:
                parts.offer(size, socket_name(os.getpid(), token))
            except OSError as e:
                why = f"no shared memory here ({e.strerror or e})"
        me = Identity(int(not why), os.getpid(), _boot_id(), token, slot_bytes, os.getuid(),
                      _ns_inode("pid"))
        left = Identity(*_trade(pg, me.values(), _SETUP_TAG))
        right_pid = _trade(pg, [os.getpid()], _BACK_TAG, to_right=False)[0]
        if not why:
            why = _mismatch(me, left)
        if not why:
            try:
                why = parts.connect(left)
            except OSError as e:
                why = f"link refused: cannot connect to the neighbour ({e.strerror or e})"
        if not _all_agree(pg, not why, _AGREE_TAG):
            return Outcome(None, why or "another rank of the group could not link", refused)
        why = parts.accept(right_pid, refused)
        if not why:
            try:
                parts.pass_memory(size)
            except (OSError, ValueError) as e:
                why = f"the neighbour's memory could not be mapped ({e})"
        if not _all_agree(pg, not why, _AGREE_TAG + pg.size()):
            return Outcome(None, why or "another rank of the group could not map", refused)
        return Outcome(parts.hand_on(), "", refused)
    finally:
        parts.close()
