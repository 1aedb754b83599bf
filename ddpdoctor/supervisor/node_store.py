"""Where the supervisors of a many-node job meet: a torch c10d TCPStore that node 0 hosts.

Node 0 (``--node-rank 0``, or the first supervisor to bind the port when torchrun's c10d
rendezvous hands out node ranks) hosts the store; every other node's supervisor connects to
it.  The address is ``--doctor-store HOST:PORT``, else the rendezvous endpoint's (or
``--master-addr``'s) host with the port after its own (29401 for the default 29400).  The
store listens on that host's address only (not every interface), and every value in it is
sealed with the job's secret (``node_auth``): what is not is dropped and logged.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ddpdoctor.config import parse_store
from ddpdoctor.host import host_name
from ddpdoctor.rundir.attempts import launcher_option
from ddpdoctor.supervisor.node_auth import Refused, Seal

PREFIX = "ddpdoctor/"
DEFAULT_RDZV_PORT = 29400
DEFAULT_MASTER_PORT = 29500
OP_TIMEOUT_S = 10.0  # one store operation (node 0 answers in milliseconds)
MAX_DROPS_LOGGED = 20  # refused values told one by one; then one line every DROPS_LOG_EVERY
DROPS_LOG_EVERY = 1000
MAX_REFUSED_KEYS = 256


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

    @property
    def leader(self) -> bool | None:
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


def preload() -> None:
    """Import torch's store before the job starts: under load the import takes seconds,
    which must not delay the nodes' first contact once the job runs."""
    key = "TORCH_CPP_LOG_LEVEL"  # connection retries: ddpdoctor says it once, itself
    ours = key not in os.environ
    if ours:
        os.environ[key] = "FATAL"
    try:
        import torch.distributed  # noqa: F401
    finally:
        if ours:
            del os.environ[key]  # the job's environment stays the user's


@dataclass(frozen=True)
class Msg:
    """A sealed value read from the store: who sent it, in which session, and what."""

    sender: str
    session: str
    t_ns: int
    value: Any


def _listen(setup: NodeSetup) -> int:
    """A socket listening on the store's own address (not every interface): its fd.  A
    host name that resolves to loopback here only (a hosts file's 127.0.1.1 for this
    machine's name) is reached by the other nodes at another address: every address then,
    as torch's store does (every message is sealed all the same)."""
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
            sock.listen(512)
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


class NodeStore:
    """Sealed JSON over a TCPStore, every key under ddpdoctor/; values that are not sealed
    with this job's secret are dropped and told to ``on_drop(key, why)`` (the first few,
    then one in ``DROPS_LOG_EVERY``)."""

    def __init__(self, store: Any, seal: Seal, on_drop: Callable[[str, str, int], None]):
        self.store = store
        self.seal = seal
        self.prefix = f"{PREFIX}{seal.key_tag()}/"  # unknown to whoever lacks the secret
        self._kept: dict[str, bytes] = {}  # sealed values set again at every republish
        self.on_drop = on_drop
        self.dropped = 0
        self._refused: dict[str, bytes] = {}  # key -> digest of the value last refused

    @classmethod
    def open(cls, setup: NodeSetup, leader: bool, connect_s: float, seal: Seal,
             on_drop: Callable[[str, str, int], None]) -> "NodeStore":
        """Host the store (leader) or connect to it; raises OSError/RuntimeError on failure."""
        preload()
        from torch.distributed import TCPStore

        fd = _listen(setup) if leader else None
        try:
            store = TCPStore(setup.host, setup.port, None, leader,
                             dt.timedelta(seconds=connect_s), wait_for_workers=False,
                             master_listen_fd=fd)
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        store.set_timeout(dt.timedelta(seconds=OP_TIMEOUT_S))
        return cls(store, seal, on_drop)

    def _drop(self, key: str, why: str, raw: bytes | None = None) -> None:
        if raw is not None:  # a value read again (a key's): told once
            digest = hashlib.sha256(raw).digest()
            if self._refused.get(key) == digest:
                return
            self._refused[key] = digest
            while len(self._refused) > MAX_REFUSED_KEYS:
                self._refused.pop(next(iter(self._refused)))
        self.dropped += 1
        if self.dropped <= MAX_DROPS_LOGGED or self.dropped % DROPS_LOG_EVERY == 0:
            self.on_drop(key, why, self.dropped)

    def set(self, key: str, value: Any, keep: bool = False) -> None:
        """Set ``key``; ``keep``: set it again, the same sealed bytes, at every
        ``republish`` (a value someone overwrites comes back)."""
        sealed = self.seal.seal(self.prefix + key, value)
        self.store.set(self.prefix + key, sealed)
        if keep:
            self._kept[key] = sealed

    def republish(self) -> None:
        for key, sealed in list(self._kept.items()):
            self.store.set(self.prefix + key, sealed)

    def read(self, key: str, session: str | None = None) -> Msg | None:
        """The sealed value of ``key`` (None when it is not set; never blocks on a missing
        key); raises Refused (told to on_drop) when it is not a sealed message of this job."""
        if not self.store.check([self.prefix + key]):
            return None
        raw = self.store.get(self.prefix + key)
        try:
            head, value = self.seal.open(self.prefix + key, raw, session)
        except Refused as e:
            self._drop(key, str(e), raw)
            raise
        return Msg(head.sender, head.session, head.t_ns, value)

    def get(self, key: str, sender: str) -> Any | None:
        """The value of ``key`` if ``sender`` sealed it, else None (dropped: told)."""
        try:
            msg = self.read(key)
        except Refused:
            return None
        if msg is None:
            return None
        if msg.sender != sender:
            self._drop(key, f"sent by {msg.sender[:32]!r}, not {sender!r}")
            return None
        return msg.value

    def add(self, key: str, n: int) -> int:
        return int(self.store.add(self.prefix + key, n))

    def push(self, queue: str, item: dict[str, Any]) -> None:
        self.store.queue_push(self.prefix + queue, self.seal.seal(self.prefix + queue, item))

    def pop_all(self, queue: str, sender: str, limit: int = 64) -> list[dict[str, Any]]:
        """Up to ``limit`` items ``sender`` sealed into ``queue``, oldest first (anything
        else is dropped and told)."""
        out = []
        key = self.prefix + queue
        for _ in range(min(limit, int(self.store.queue_len(key)))):
            try:
                raw = self.store.queue_pop(key, False)
            except Exception:  # noqa: BLE001 - torch's QueueEmptyError: drained meanwhile
                break
            try:
                head, item = self.seal.open(key, raw, once=True)
            except Refused as e:
                self._drop(queue, str(e))
                continue
            if head.sender != sender or not isinstance(item, dict):
                self._drop(queue, f"an item from {head.sender[:32]!r} that is not {sender!r}'s")
                continue
            out.append(item)
        return out


def this_node_id(setup: NodeSetup) -> str:
    """A following node's name in messages and mirror dirs: its node rank, else host-pid."""
    if setup.node_rank is not None:
        return str(setup.node_rank)
    return f"{host_name()}-{os.getpid()}"
