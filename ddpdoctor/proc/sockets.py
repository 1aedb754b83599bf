"""The kernel's view of a process's TCP connections: queues, retransmissions, idle times.

Why: when every rank of a job waits inside the same call and none progresses, the question
is what carries the call.  The kernel knows: a connection whose sent bytes sit
unacknowledged while it retransmits them is a network path that stopped delivering.

How, and who may: the process's socket inodes come from ``/proc/PID/fd`` (the process's
owner or root); their state from the kernel's socket diagnostics (netlink ``sock_diag``,
what ``ss -tin`` reads: unacknowledged and unsent bytes, retransmissions, and the
milliseconds since data was last received) when the process shares this process's network
namespace (a supervisor and the ranks it started do), else from ``/proc/PID/net/tcp`` and
``tcp6`` of the process's own namespace (queues, retransmissions and timer; no idle times).
Neither needs root.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any

SOCKETS_FILE = "pid-{pid}.sockets.json"  # in a run dir's stacks/, beside the pid's stack

TCP_STATES = {1: "established", 2: "syn_sent", 3: "syn_recv", 4: "fin_wait1",
              5: "fin_wait2", 6: "time_wait", 7: "close", 8: "close_wait", 9: "last_ack",
              10: "listen", 11: "closing"}
TIMERS = {0: "off", 1: "retransmit", 2: "keepalive", 3: "time_wait", 4: "zero_window_probe"}
LISTEN = 10

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_INFO = 2
DIAG_TIMEOUT_S = 2.0
_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_DIAG_MSG = struct.Struct("=BBBB2s2s16s16sI8sIIIII")  # inet_diag_msg: 72 bytes
_RTATTR = struct.Struct("=HH")

# struct tcp_info (linux/tcp.h): offset and format of the fields read; a shorter struct
# (an older kernel) leaves the fields past its end unknown
_TCP_INFO = {"backoff": (4, "B"), "rto_us": (8, "I"), "unacked_segs": (24, "I"),
             "last_data_sent_ms": (44, "I"), "last_data_recv_ms": (52, "I"),
             "last_ack_recv_ms": (56, "I"), "total_retrans": (100, "I"),
             "bytes_acked": (120, "Q"), "bytes_received": (128, "Q"),
             "notsent_bytes": (144, "I"), "snd_wnd": (228, "I"),
             "total_rto_recoveries": (242, "H"), "total_rto_time_ms": (244, "I")}


@dataclass(frozen=True)
class TcpSocket:
    """One TCP socket as the kernel tells it.

    local, remote: ``ip:port`` (``[ip6]:port``; an IPv4-mapped IPv6 address as IPv4).
    tx_queue: bytes the process wrote that the peer has not acknowledged (sent or not yet).
    rx_queue: bytes received that the process has not read.
    retransmits: retransmissions of the oldest unacknowledged segment so far (0 once acked);
    under a zero-window probe timer, the probes sent (sock_diag) or 0 (/proc).
    timer: the pending timer (retransmit, keepalive, zero_window_probe, time_wait, off).
    The rest only from sock_diag (None from /proc/PID/net/tcp): times in milliseconds ago,
    byte counters over the connection's life, ``notsent_bytes`` the part of tx_queue not
    sent yet, ``snd_wnd`` the window the peer last offered (a zero-window probe timer with
    an open window: the kernel cannot send at all, e.g. no route to the peer), and
    ``total_rto_time_ms`` the time spent in retransmission timeouts over
    ``total_rto_recoveries`` episodes, the unfinished one included (kernel 6.7 and later).
    """

    inode: int
    local: str
    remote: str
    state: str
    tx_queue: int
    rx_queue: int
    retransmits: int
    timer: str
    last_data_recv_ms: int | None = None
    last_data_sent_ms: int | None = None
    last_ack_recv_ms: int | None = None
    total_retrans: int | None = None
    backoff: int | None = None
    rto_us: int | None = None
    unacked_segs: int | None = None
    notsent_bytes: int | None = None
    bytes_acked: int | None = None
    bytes_received: int | None = None
    snd_wnd: int | None = None
    total_rto_recoveries: int | None = None
    total_rto_time_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @staticmethod
    def from_dict(data: Any) -> "TcpSocket | None":
        """A socket from a capture file, or None when a required field is missing or of the
        wrong type (a damaged file is read as far as it is sound)."""
        if not isinstance(data, dict):
            return None
        values: dict[str, Any] = {}
        for f in fields(TcpSocket):
            v = data.get(f.name)
            want = str if f.name in ("local", "remote", "state", "timer") else int
            if v is None and f.default is None:
                continue
            if type(v) is not want:
                return None
            values[f.name] = v
        return TcpSocket(**values)


@dataclass(frozen=True)
class SocketCapture:
    """A process's TCP sockets at one moment: ``source`` is sock_diag or proc (which fields
    are known); ``error`` says why there are none when they could not be read."""

    pid: int
    taken_ns: int
    source: str
    sockets: tuple[TcpSocket, ...] = ()
    error: str | None = None
    netns: int | None = None  # the network namespace's inode: the sockets' address space

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pid": self.pid, "taken_ns": self.taken_ns,
                               "source": self.source, "netns": self.netns,
                               "sockets": [s.to_dict() for s in self.sockets]}
        if self.error is not None:
            out["error"] = self.error
        return out

    @staticmethod
    def from_dict(data: Any) -> "SocketCapture | None":
        if not isinstance(data, dict) or type(data.get("pid")) is not int or \
                type(data.get("taken_ns")) is not int:
            return None
        raw = data.get("sockets")
        sockets = tuple(s for s in map(TcpSocket.from_dict, raw if isinstance(raw, list)
                                       else []) if s is not None)
        netns = data.get("netns")
        error = data.get("error")
        return SocketCapture(data["pid"], data["taken_ns"], str(data.get("source", "")),
                             sockets, str(error) if error is not None else None,
                             netns if type(netns) is int else None)


# -- which sockets a process holds -------------------------------------------------------
def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets ``pid`` has open (raises OSError when /proc/PID/fd cannot
    be read: the process is gone or another user's)."""
    found = set()
    base = f"/proc/{pid}/fd"
    for name in os.listdir(base):
        try:
            target = os.readlink(f"{base}/{name}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            found.add(int(target[8:-1]))
    return found


def netns_inode(pid: int | str = "self") -> int | None:
    """The inode of ``pid``'s network namespace (None when it cannot be read)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


# -- /proc/PID/net/tcp{,6} -----------------------------------------------------------------
def _hex_address(text: str) -> str:
    """``0100007F:1F90`` -> ``127.0.0.1:8080`` (the kernel prints the address in host byte
    order, 32 bits at a time, and the port in hex)."""
    addr, _, port = text.partition(":")
    words = [int(addr[i:i + 8], 16) for i in range(0, len(addr), 8)]
    raw = b"".join(struct.pack("=I", w) for w in words)
    return endpoint(raw, int(port, 16))


def endpoint(raw: bytes, port: int) -> str:
    """``ip:port`` for a 4- or 16-byte address; an IPv4-mapped IPv6 address as IPv4."""
    if len(raw) == 16 and raw[:12] == b"\0" * 10 + b"\xff\xff":
        raw = raw[12:]
    if len(raw) == 4:
        return f"{socket.inet_ntop(socket.AF_INET, raw)}:{port}"
    return f"[{socket.inet_ntop(socket.AF_INET6, raw)}]:{port}"


def parse_proc_tcp(text: str) -> list[TcpSocket]:
    """The sockets of a /proc/net/tcp or tcp6 table (listening ones left out)."""
    out = []
    for line in text.splitlines()[1:]:
        f = line.split()
        try:
            state = int(f[3], 16)
            if state == LISTEN:
                continue
            tx, rx = (int(x, 16) for x in f[4].split(":"))
            timer = int(f[5].split(":")[0], 16)
            out.append(TcpSocket(int(f[9]), _hex_address(f[1]), _hex_address(f[2]),
                                 TCP_STATES.get(state, str(state)), tx, rx, int(f[6], 16),
                                 TIMERS.get(timer, str(timer))))
        except (IndexError, ValueError, OSError):
            continue  # a line of another format: skipped
    return out


def proc_tcp(pid: int) -> list[TcpSocket]:
    """Every TCP socket of ``pid``'s network namespace, from /proc/PID/net/tcp and tcp6."""
    out: list[TcpSocket] = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                out += parse_proc_tcp(f.read())
        except OSError:
            continue  # no IPv6
    return out


# -- sock_diag (netlink) -------------------------------------------------------------------
def _diag_request(family: int, seq: int) -> bytes:
    """A dump request for every TCP socket of ``family`` but the listening ones, with
    tcp_info."""
    states = 0xFFF & ~(1 << LISTEN)
    body = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0,
                       states) + b"\0" * 48
    return _NLMSG.pack(_NLMSG.size + len(body), SOCK_DIAG_BY_FAMILY,
                       NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def tcp_info_fields(info: bytes) -> dict[str, int]:
    """The fields of a struct tcp_info that this kernel's struct holds."""
    out = {}
    for name, (offset, fmt) in _TCP_INFO.items():
        size = struct.calcsize(fmt)
        if len(info) >= offset + size:
            out[name] = struct.unpack_from("=" + fmt, info, offset)[0]
    return out


def parse_diag_message(payload: bytes) -> TcpSocket | None:
    """One inet_diag_msg (and its attributes) as a TcpSocket."""
    if len(payload) < _DIAG_MSG.size:
        return None
    (family, state, timer, retrans, sport, dport, src, dst, _if, _cookie, _expires,
     rqueue, wqueue, _uid, inode) = _DIAG_MSG.unpack_from(payload)
    width = 4 if family == socket.AF_INET else 16
    info: dict[str, int] = {}
    at = _DIAG_MSG.size
    while at + _RTATTR.size <= len(payload):
        length, kind = _RTATTR.unpack_from(payload, at)
        if length < _RTATTR.size:
            break
        if kind == INET_DIAG_INFO:
            info = tcp_info_fields(payload[at + _RTATTR.size:at + length])
        at += (length + 3) & ~3
    return TcpSocket(inode, endpoint(src[:width], int.from_bytes(sport, "big")),
                     endpoint(dst[:width], int.from_bytes(dport, "big")),
                     TCP_STATES.get(state, str(state)), wqueue, rqueue, retrans,
                     TIMERS.get(timer, str(timer)), **info)


def _read_dump(sock: socket.socket, seq: int) -> list[TcpSocket]:
    out: list[TcpSocket] = []
    while True:
        data = sock.recv(1 << 16)
        at = 0
        while at + _NLMSG.size <= len(data):
            length, kind, _flags, got_seq, _pid = _NLMSG.unpack_from(data, at)
            if length < _NLMSG.size:
                return out
            if got_seq == seq:
                if kind == NLMSG_DONE:
                    return out
                if kind == NLMSG_ERROR:
                    code = struct.unpack_from("=i", data, at + _NLMSG.size)[0]
                    raise OSError(-code, os.strerror(-code))
                found = parse_diag_message(data[at + _NLMSG.size:at + length])
                if found is not None:
                    out.append(found)
            at += (length + 3) & ~3
        if not data:
            return out


def diag_tcp() -> list[TcpSocket]:
    """Every TCP socket of this process's network namespace, from sock_diag (raises
    OSError when netlink is not available)."""
    out: list[TcpSocket] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as sock:
        sock.settimeout(DIAG_TIMEOUT_S)
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), start=1):
            sock.sendall(_diag_request(family, seq))
            out += _read_dump(sock, seq)
    return out


# -- a process's sockets -------------------------------------------------------------------
@dataclass
class NamespaceTables:
    """The TCP tables already read, by network namespace: a job's ranks share one, so it is
    read once for all of them."""

    by_netns: dict[int | None, tuple[str, list[TcpSocket]]] = field(default_factory=dict)

    def sockets_of(self, pid: int) -> tuple[int | None, str, list[TcpSocket]]:
        """(netns, source, every socket of ``pid``'s namespace)."""
        netns = netns_inode(pid)
        if netns not in self.by_netns or netns is None:
            self.by_netns[netns] = _read_table(pid, netns)
        source, table = self.by_netns[netns]
        return netns, source, table


def _read_table(pid: int, netns: int | None) -> tuple[str, list[TcpSocket]]:
    if netns is not None and netns == netns_inode():
        try:
            return "sock_diag", diag_tcp()
        except OSError:
            pass  # no netlink here (a sandbox): the proc tables say less, but say it
    return "proc", proc_tcp(pid)


def capture(pid: int, tables: NamespaceTables | None = None) -> SocketCapture:
    """The TCP sockets ``pid`` holds now, with the kernel's state of each."""
    now = time.time_ns()
    tables = tables if tables is not None else NamespaceTables()
    try:
        inodes = socket_inodes(pid)
    except OSError as e:
        return SocketCapture(pid, now, "", error=f"cannot list its open files: "
                             f"{e.strerror or e}")
    netns, source, table = tables.sockets_of(pid)
    mine = tuple(s for s in table if s.inode in inodes)
    return SocketCapture(pid, now, source, mine, netns=netns)
