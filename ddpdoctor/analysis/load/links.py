"""Stalled links: the ranks' connections whose written bytes the network does not deliver.

From the kernel's state of every rank's TCP sockets at the verdict (proc/sockets.py): a
connection is the pair of sockets whose addresses mirror each other (one on each rank's
host), and each of its directions is judged on its own.  A direction stalled when its
sender holds bytes the peer never acknowledged while the kernel keeps trying to deliver
them: retransmitting, or probing an open window it cannot send into (no route).  With both
ends captured, the byte counters tell which way the path drops: bytes that reached the
receiver and stay unacknowledged lost their acknowledgements on the way back.  How long
nothing has moved is the receiver's time since new data last arrived (the sender's time
since an acknowledgement last arrived when the receiver's side was not captured).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddpdoctor.proc.sockets import TcpSocket

LOOPBACK = ("127.", "[::1]")


@dataclass(frozen=True)
class RankSocket:
    """One TCP socket of a rank (``host`` as its trace names it) at the verdict."""

    rank: int
    host: str
    socket: TcpSocket


@dataclass(frozen=True)
class Link:
    """One stalled direction of a connection: ``from_rank`` wrote ``unacked_bytes`` that
    ``to_rank`` (None: a process that is no rank, or whose host was not captured) has not
    acknowledged; ``idle_s``: seconds since new bytes last arrived (None: unknown)."""

    from_rank: int
    to_rank: int | None
    from_host: str
    to_host: str
    from_addr: str
    to_addr: str
    unacked_bytes: int
    idle_s: float | None
    retransmits: int
    unsent_bytes: int | None = None  # of unacked_bytes, those the kernel could not send yet
    arrived: bool | None = None  # every byte sent reached the peer: its acks are lost

    @property
    def path(self) -> tuple[str, str]:
        """The host pair whose path drops: the data's, or the acknowledgements' when the
        data arrived."""
        return (self.to_host, self.from_host) if self.arrived else \
            (self.from_host, self.to_host)

    @property
    def path_ips(self) -> tuple[str, str]:
        """The addresses (no ports) of the path's two ends, as in ``path``."""
        ends = (_ip(self.from_addr), _ip(self.to_addr))
        return (ends[1], ends[0]) if self.arrived else ends

    def to_dict(self) -> dict[str, Any]:
        return {"from_rank": self.from_rank, "to_rank": self.to_rank,
                "from_host": self.from_host, "to_host": self.to_host,
                "unacked_bytes": self.unacked_bytes, "idle_s": self.idle_s,
                "from_addr": self.from_addr, "to_addr": self.to_addr,
                "retransmits": self.retransmits, "unsent_bytes": self.unsent_bytes,
                "arrived": self.arrived, "path": list(self.path)}


@dataclass(frozen=True)
class PeerConnection:
    """A rank's connection to another rank (``peer``), as its kernel tells it: bytes it
    wrote that are unacknowledged, retransmissions, seconds since new data last arrived
    on it, and whether its sending direction stalled."""

    rank: int
    peer: int
    local: str
    remote: str
    unacked_bytes: int
    retransmits: int
    idle_s: float | None
    stalled: bool

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "peer": self.peer, "local": self.local,
                "remote": self.remote, "unacked_bytes": self.unacked_bytes,
                "retransmits": self.retransmits, "idle_s": self.idle_s,
                "stalled": self.stalled}


@dataclass(frozen=True)
class LinkFacts:
    """What the ranks' captured sockets say: each rank's connections to the other ranks,
    and the stalled directions (among them, or towards hosts and processes outside)."""

    connections: tuple[PeerConnection, ...] = ()
    links: tuple[Link, ...] = ()


def sending_stalled(s: TcpSocket) -> bool:
    """Does this socket hold bytes the network does not deliver?  Unacknowledged bytes and
    the kernel retransmitting them, or probing a window the peer left open (a true zero
    window, a peer that does not read, is no stall of the network)."""
    if s.tx_queue <= 0 or s.state != "established":
        return False
    if s.timer == "retransmit":
        return s.retransmits > 0
    return s.timer == "zero_window_probe" and bool(s.snd_wnd)


def _ip(addr: str) -> str:
    return addr.rpartition(":")[0]


def _peer_of(mine: RankSocket, by_ends: dict[tuple[str, str], list[RankSocket]]
             ) -> RankSocket | None:
    """The other end of ``mine``: the socket whose local and remote addresses are its
    remote and local ones, of another rank (on the same host when the address is a
    loopback one, which every host has)."""
    s = mine.socket
    local = s.local.startswith(LOOPBACK)
    for other in by_ends.get((s.remote, s.local), []):
        if other.rank != mine.rank and (not local or other.host == mine.host):
            return other
    return None


def arrived(sender: TcpSocket, receiver: TcpSocket) -> bool | None:
    """Did every byte ``sender`` sent (and has no acknowledgement of) reach ``receiver``?
    From the byte counters of both ends (a connecting side's count of acknowledged bytes
    includes its SYN: one byte of slack); None when a counter is unknown."""
    if None in (sender.bytes_acked, receiver.bytes_received):
        return None
    sent = sender.tx_queue - (sender.notsent_bytes or 0)
    if sent <= 0:
        return False  # nothing left the sender: the way there is what stopped
    got = receiver.bytes_received - sender.bytes_acked  # type: ignore[operator]
    return got + 1 >= sent


def stalled_links(sockets: list[RankSocket]) -> list[Link]:
    """Every stalled direction among the ranks' sockets, the most unacknowledged bytes
    first."""
    by_ends: dict[tuple[str, str], list[RankSocket]] = {}
    hosts: dict[str, str] = {}  # ip -> the host of a rank with a socket on it
    for rs in sockets:
        by_ends.setdefault((rs.socket.local, rs.socket.remote), []).append(rs)
        if not rs.socket.local.startswith(LOOPBACK):
            hosts.setdefault(_ip(rs.socket.local), rs.host)
    links = []
    for rs in sockets:
        s = rs.socket
        if not sending_stalled(s):
            continue
        peer = _peer_of(rs, by_ends)
        if peer is not None and peer.socket.last_data_recv_ms is not None:
            idle_ms: int | None = peer.socket.last_data_recv_ms
        else:
            idle_ms = s.last_ack_recv_ms
        links.append(Link(rs.rank, peer.rank if peer else None, rs.host,
                          peer.host if peer else hosts.get(_ip(s.remote), _ip(s.remote)),
                          s.local, s.remote, s.tx_queue, _seconds(idle_ms), s.retransmits,
                          s.notsent_bytes, arrived(s, peer.socket) if peer else None))
    return sorted(links, key=lambda k: (-k.unacked_bytes, k.from_rank, k.from_addr))


def _seconds(ms: int | None) -> float | None:
    return round(ms / 1000, 1) if ms is not None else None


def link_facts(sockets: list[RankSocket]) -> LinkFacts:
    """The ranks' connections to each other (both ends captured) and the stalled
    directions."""
    by_ends: dict[tuple[str, str], list[RankSocket]] = {}
    for rs in sockets:
        by_ends.setdefault((rs.socket.local, rs.socket.remote), []).append(rs)
    conns = []
    for rs in sockets:
        peer = _peer_of(rs, by_ends)
        if peer is not None:
            s = rs.socket
            conns.append(PeerConnection(rs.rank, peer.rank, s.local, s.remote, s.tx_queue,
                                        s.retransmits, _seconds(s.last_data_recv_ms),
                                        sending_stalled(s)))
    conns.sort(key=lambda c: (c.rank, c.peer, c.local))
    return LinkFacts(tuple(conns), tuple(stalled_links(sockets)))


def size_text(n: int) -> str:
    """``312 B``, ``48.2 kB``, ``1.2 MB``."""
    for unit, scale in (("GB", 10 ** 9), ("MB", 10 ** 6), ("kB", 10 ** 3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def host_pairs(links: list[Link]) -> list[tuple[str, str]]:
    """The host pairs whose paths drop (Link.path), the most bytes held first."""
    held: dict[tuple[str, str], int] = {}
    for k in links:
        held[k.path] = held.get(k.path, 0) + k.unacked_bytes
    return sorted(held, key=lambda p: -held[p])


def links_summary(links: list[Link]) -> str:
    """``the link host-a -> host-b: 3 connections hold 1.2 MB unacknowledged, idle 41 s``."""
    pairs = [f"{a} -> {b}" for a, b in host_pairs(links)]
    word = "link" if len(pairs) == 1 else "links"
    held = sum(k.unacked_bytes for k in links)
    idles = [k.idle_s for k in links if k.idle_s is not None]
    conns = f"{len(links)} connection" + (" holds" if len(links) == 1 else "s hold")
    idle = f", idle {min(idles):.0f} s" if idles else ""
    return f"the {word} {', '.join(pairs[:4])}: {conns} {size_text(held)} unacknowledged{idle}"


def link_line(k: Link) -> str:
    """One stalled direction, in a sentence."""
    to = f"rank {k.to_rank}" if k.to_rank is not None else "a process that is no rank"
    held = size_text(k.unacked_bytes)
    if k.arrived:
        what = (f"{held} unacknowledged though they arrived: the acknowledgements from "
                f"{k.to_host} are lost on the way back ({k.retransmits} retransmissions)")
    elif k.unsent_bytes is not None and k.unsent_bytes >= k.unacked_bytes:
        what = (f"{held} written and none of it sent: the kernel cannot send to "
                f"{k.to_host} at all, though its window is open (no route?)")
    else:
        what = f"{held} unacknowledged, {k.retransmits} retransmissions"
    idle = f"; nothing new arrived for {k.idle_s:.1f} s" if k.idle_s is not None else ""
    return (f"Rank {k.from_rank} ({k.from_host}, {k.from_addr}) -> {to} ({k.to_host}, "
            f"{k.to_addr}): {what}{idle}.")
