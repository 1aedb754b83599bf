"""Where the supervisors of a many-node job meet: the address node 0 listens on for the others.

Node 0 (``--node-rank 0``, or the first supervisor to bind the port when torchrun's c10d
rendezvous hands out node ranks) listens; every other node's supervisor connects to it
(node_channel, node_link: authenticated with the job's secret both ways before any message).  The
address is ``--doctor-store HOST:PORT``, else the rendezvous endpoint's (or
``--master-addr``'s) host with the port after its own (29401 for the default 29400).  Node
0 listens on that host's address only (not every interface).

The port is claimed before the job starts (``claim_channel``): node 0 binds it, and a port
that is taken is an error that says so (and by which uid), exit 2: never a node that
quietly decides alone because another user listened first.  A node that does not know its
rank leads when it binds the port, follows when what holds it proves the job's secret, and
stops with that error when it does not; a following node whose node 0 is already up checks
the same, so a port squatted before the job is refused on every node.
"""

from __future__ import annotations

import dataclasses
import errno
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ddpdoctor.config import parse_store
from ddpdoctor.errors import UserError
from ddpdoctor.host import host_name
from ddpdoctor.rundir.attempts import launcher_option
from ddpdoctor.supervisor.node_auth import Refused, channel_key
from ddpdoctor.supervisor.node_channel import Hub
from ddpdoctor.supervisor.node_link import Silent, handshake

PROBE_S = 10.0  # how long a node waits for what holds the port to prove the secret
EXIT_USAGE = 2

DEFAULT_RDZV_PORT = 29400
DEFAULT_MASTER_PORT = 29500


@dataclass(frozen=True)
class NodeSetup:
    """How this node's supervisor joins the others: ``leader`` is None when the node rank
    is not known (the first to bind the port leads)."""

    host: str
    port: int
    nnodes: int
    node_rank: int | None
    min_nodes: int = 0  # --nnodes MIN:MAX (or N): the nodes the job needs to start
    rdzv_id: str = ""  # torchrun's --rdzv-id, given alike on every node
    listener: int | None = None  # the port, claimed before the job started (its fd)

    @property
    def leader(self) -> bool | None:
        if self.listener is not None:
            return True
        return None if self.node_rank is None else self.node_rank == 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def _port_after(endpoint: str, default: int) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":") if ":" in endpoint else (endpoint, "", "")
    try:
        return host or endpoint, int(port) + 1 if port else default + 1
    except ValueError:
        return host or endpoint, default + 1


def node_setup(argv: Sequence[str], store: str | None) -> NodeSetup | None:
    """The node set-up of a job started as ``argv`` (None for a one-node job)."""
    nnodes_text = launcher_option(argv, ("--nnodes",))
    if nnodes_text is None:
        return None
    try:
        counts = [int(part) for part in nnodes_text.split(":")]
    except ValueError:
        return None
    nnodes = max(counts)
    if nnodes <= 1:
        return None
    rank_text = launcher_option(argv, ("--node-rank", "--node_rank"))
    node_rank = int(rank_text) if rank_text is not None and rank_text.isdigit() else None
    if store:
        host, port = parse_store(store)
    else:
        endpoint = launcher_option(argv, ("--rdzv-endpoint", "--rdzv_endpoint"))
        if endpoint:
            host, port = _port_after(endpoint, DEFAULT_RDZV_PORT)
        else:
            addr = launcher_option(argv, ("--master-addr", "--master_addr")) or "127.0.0.1"
            mport = launcher_option(argv, ("--master-port", "--master_port"))
            host, port = _port_after(f"{addr}:{mport}" if mport else addr,
                                     DEFAULT_MASTER_PORT)
    rdzv_id = launcher_option(argv, ("--rdzv-id", "--rdzv_id")) or ""
    return NodeSetup(host, port, nnodes, node_rank, min(counts), rdzv_id)


def _listen(setup: NodeSetup) -> int:
    """A socket listening on the store's own address (not every interface): its fd.  A
    host name that resolves to loopback here only (a hosts file's 127.0.1.1 for this
    machine's name) is reached by the other nodes at another address: every address then,
    as torch's store does (every connection proves the secret all the same)."""
    error: OSError | None = None
    addrs = socket.getaddrinfo(setup.host, setup.port, type=socket.SOCK_STREAM)
    if _loopback_alias(setup.host, [a[4][0] for a in addrs]):
        addrs = socket.getaddrinfo(None, setup.port, socket.AF_INET6, socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE) + \
            socket.getaddrinfo(None, setup.port, socket.AF_INET, socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    for family, kind, proto, _, addr in addrs:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(1024)
            return sock.detach()
        except OSError as e:
            sock.close()
            error = e
    raise error or OSError(f"no address for {setup.host}")


def _loopback_alias(host: str, addresses: list[str]) -> bool:
    """A name other than a loopback one whose every address here is loopback."""
    named_loopback = host in ("localhost", "localhost.localdomain") or \
        host.startswith("127.") or host == "::1"
    return not named_loopback and bool(addresses) and \
        all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def open_hub(setup: NodeSetup, key: bytes, on_drop: Callable[[str, str, int], None]) -> Hub:
    """Node 0's end of the nodes' channel, on the port claimed before the job (else bound
    now, on the channel's own address); raises OSError when it cannot (the port is taken)."""
    fd = setup.listener if setup.listener is not None else _listen(setup)
    return Hub(socket.socket(fileno=fd), key, on_drop)


def listening_uids(port: int) -> list[int]:
    """The uids whose sockets listen on TCP ``port`` on this host (from /proc/net/tcp{,6})."""
    uids = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 7 and f[3] == "0A" and f[1].rsplit(":", 1)[-1] == f"{port:04X}":
                uids.add(int(f[7]))
    return sorted(uids)


def _taken(setup: NodeSetup, e: OSError) -> UserError:
    held = listening_uids(setup.port)
    who = f" (listening: uid {', '.join(map(str, held))})" if held else ""
    why = "is taken" if e.errno == errno.EADDRINUSE else f"cannot be listened on ({e.strerror or e})"
    return UserError(f"the nodes' channel port {setup.address} {why}{who}: another process holds "
                     "it, and no node could lead the job there; choose a free one with "
                     "--doctor-store HOST:PORT (the same on every node)", EXIT_USAGE)


def _probe(setup: NodeSetup, key: bytes) -> bool | None:
    """Does what listens at the channel's address prove the secret?  False only when it
    speaks another protocol or fails the proof; None when nothing listens there (yet), or
    what does says no word of the handshake in time (a node 0 slow to come up, a relay
    holding the connection: the node tries again when it connects)."""
    try:
        sock = socket.create_connection((setup.host, setup.port), timeout=2.0)
    except OSError:
        return None
    try:
        handshake(sock, key, PROBE_S).close()
    except Silent:
        return None
    except (Refused, OSError):
        return False
    return True


def claim_channel(setup: NodeSetup | None, secret: str) -> NodeSetup | None:
    """Before the job starts: node 0 takes its port (and holds it from now on), a node
    that does not know its rank leads when it can take the port; a UserError (exit 2) when
    the port is taken from node 0, or held by something that does not prove the job's
    secret (another user's process, a node 0 of another secret)."""
    if setup is None:
        return None
    if setup.leader is not False:  # node 0, or a node that does not know its rank
        try:
            return dataclasses.replace(setup, listener=_listen(setup))
        except OSError as e:
            if setup.leader is True:
                raise _taken(setup, e) from None
    if _probe(setup, channel_key(secret)) is False:
        held = listening_uids(setup.port)
        who = f" (listening: uid {', '.join(map(str, held))})" if held else ""
        raise UserError(f"the nodes' channel port {setup.address} is held by a process that "
                        f"does not prove this job's secret{who}: another program took node "
                        "0's port, or node 0 has another secret; choose a free port with "
                        "--doctor-store HOST:PORT, the same secret on every node", EXIT_USAGE)
    return setup


def this_node_id(setup: NodeSetup) -> str:
    """A following node's name in messages and mirror dirs: its node rank, else host-pid."""
    if setup.node_rank is not None:
        return str(setup.node_rank)
    return f"{host_name()}-{os.getpid()}"
