"""The set-up of a group's shared-memory links: trade, verify the peers, seal and pass the memory.

Every rank of the group, at the same ring call: makes a memfd (sealed against resizing)
and a listening unix socket, trades over the group's own send/recv what its neighbours
must know (its pid, uid, host, pid and network namespaces, socket name, slot size: to the
right; its pid: to the left), connects to its left neighbour's socket, and the ranks agree around
the ring that every link works, twice (connected; mapped).

Only the job's own ranks get in.  The listening socket is a path socket alone in a
directory of its own, made with mode 0700 under the temporary directory and named after the
rank's pid and a random 62-bit token that only its neighbours learn: no other user can
reach it (not even to fill its backlog: a flood of strangers' connections is refused by the
kernel, and the ring neither waits nor falls back to gloo), and nobody can plant it
beforehand.  A process of this same user can reach it, so each end checks the other with
``SO_PEERCRED``: a connection to this rank's socket is accepted only from the right
neighbour's pid (traded above) under this process's uid; any other is closed unanswered,
noted once in the trace, and the rank keeps accepting until its neighbour arrives.  The
connecting rank checks the same of the listener it reached.  The socket and its directory
are removed once the neighbour is in.  The memfd goes out as a read-only descriptor (a
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
import stat
import struct
import tempfile
import threading
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
    net_ns: int  # another network namespace is another host to the job (a container's)

    def values(self) -> list[int]:
        return [self.ok, self.pid, self.boot, self.token, self.slot_bytes, self.uid,
                self.pid_ns, self.net_ns]


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


def socket_dir(pid: int, token: int) -> str:
    """The directory (mode 0700) that holds the listening socket of rank ``pid``."""
    return os.path.join(tempfile.gettempdir(), f"ddpdoctor-ring-{pid:x}-{token:x}")


def socket_name(pid: int, token: int) -> str:
    """The path of the listening socket of rank ``pid`` (``token``: its set-up's)."""
    return os.path.join(socket_dir(pid, token), "s")


def _private_dir(path: str) -> None:
    """Make ``path`` a new directory of this user that nobody else can enter; raises
    OSError (it exists already: planted, or a leftover)."""
    os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise OSError(f"{path} is not a private directory")


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
    if left.net_ns != me.net_ns:
        return "peers in another network namespace"
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
        self.path: str | None = None  # the listening socket's, until it is removed
        self._acceptor: threading.Thread | None = None
        self._accept_why = ""
        self._stop_accepting = threading.Event()

    def offer(self, size: int, name: str) -> None:
        """The listening socket and this rank's sealed memfd, mapped; raises OSError."""
        _private_dir(os.path.dirname(name))
        self.path = name
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
        is the neighbour).  A full backlog (others' connections its acceptor has not
        refused yet) is waited out."""
        self.into = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.into.setblocking(False)
        deadline = time.monotonic() + CONNECT_S
        while True:
            try:
                self.into.connect(socket_name(left.pid, left.token))
                break
            except (BlockingIOError, InterruptedError):
                if time.monotonic() > deadline:
                    return ("link refused: the neighbour's socket stayed full (others' "
                            "connections)")
                time.sleep(0.001)
        self.into.settimeout(CONNECT_S)
        pid, uid = peer_cred(self.into)
        if pid != left.pid or uid != os.getuid():
            return f"link refused: the socket is held by pid {pid} uid {uid}, not the neighbour"
        return ""

    def _take(self, conn: socket.socket, right_pid: int, refused: list[str]) -> None:
        """Keep ``conn`` if it is the right neighbour's (the first), else close it."""
        try:
            pid, uid = peer_cred(conn)
        except OSError:
            pid, uid = -1, -1
        if self.out is None and pid == right_pid and uid == os.getuid():
            conn.setblocking(True)
            self.out = conn
            self.unlink()  # nobody else needs to reach it now
            return
        conn.close()
        if len(refused) < 8:
            refused.append(f"pid {pid} uid {uid}")

    def start_accepting(self, right_pid: int, refused: list[str]) -> None:
        """Accept from now on, in a thread, until the right neighbour's connection comes
        (refusing anyone else's at once, so that no flood fills the backlog while this
        rank waits elsewhere) or ``CONNECT_S`` passes."""
        self._acceptor = threading.Thread(target=self._accept, args=(right_pid, refused),
                                          name="ddpdoctor-ring-accept", daemon=True)
        self._acceptor.start()

    def accepted(self) -> str:
        """Wait for the acceptor: "" once the neighbour came, else why not."""
        if self._acceptor is None:
            return "link refused: not accepting"
        self._acceptor.join()
        self._acceptor = None
        return self._accept_why

    def _accept(self, right_pid: int, refused: list[str]) -> None:
        assert self.listener is not None
        deadline = time.monotonic() + CONNECT_S
        while self.out is None:
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                self._accept_why = "link refused: timeout (the neighbour never connected)"
                return
            if self._stop_accepting.is_set():
                self._accept_why = "link refused: another rank of the group could not link"
                return
            self.listener.settimeout(min(left_s, 0.05))
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError as e:
                self._accept_why = f"link refused: the socket failed ({e.strerror or e})"
                return
            self._take(conn, right_pid, refused)
        self._accept_why = ""

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

    def unlink(self) -> None:
        """Remove the listening socket's path and its directory."""
        if self.path is not None:
            for remove, target in ((os.unlink, self.path), (os.rmdir, os.path.dirname(self.path))):
                try:
                    remove(target)
                except OSError:
                    pass  # gone already
            self.path = None

    def close(self) -> None:
        if self._acceptor is not None:
            self._stop_accepting.set()
            self._acceptor.join()
            self._acceptor = None
        self.unlink()
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
                      _ns_inode("pid"), _ns_inode("net"))
        left = Identity(*_trade(pg, me.values(), _SETUP_TAG))
        right_pid = _trade(pg, [os.getpid()], _BACK_TAG, to_right=False)[0]
        if not why:
            why = _mismatch(me, left)
        if not why:
            parts.start_accepting(right_pid, refused)
            try:
                why = parts.connect(left)
            except OSError as e:
                why = f"link refused: cannot connect to the neighbour ({e.strerror or e})"
        if not _all_agree(pg, not why, _AGREE_TAG):
            return Outcome(None, why or "another rank of the group could not link", refused)
        why = parts.accepted()
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
