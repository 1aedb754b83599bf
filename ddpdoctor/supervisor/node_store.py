"""Where the supervisors of a many-node job meet: a torch c10d TCPStore that node 0 hosts.

Node 0 (``--node-rank 0``, or the first supervisor to bind the port when torchrun's c10d
rendezvous hands out node ranks) hosts the store; every other node's supervisor connects to
it.  The address is ``--doctor-store HOST:PORT``, else the rendezvous endpoint's (or
``--master-addr``'s) host with the port after its own (29401 for the default 29400).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass
from typing import Any, Sequence

from ddpdoctor.config import parse_store
from ddpdoctor.host import host_name
from ddpdoctor.rundir.attempts import launcher_option

PREFIX = "ddpdoctor/"
DEFAULT_RDZV_PORT = 29400
DEFAULT_MASTER_PORT = 29500
OP_TIMEOUT_S = 10.0  # one store operation (node 0 answers in milliseconds)


@dataclass(frozen=True)
class NodeSetup:
    """How this node's supervisor joins the others: ``leader`` is None when the node rank
    is not known (the first to bind the port leads)."""

    host: str
    port: int
    nnodes: int
    node_rank: int | None
    min_nodes: int = 0  # --nnodes MIN:MAX (or N): the nodes the job needs to start

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
    return NodeSetup(host, port, nnodes, node_rank, min(counts))


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


class NodeStore:
    """JSON over a TCPStore, every key under ddpdoctor/."""

    def __init__(self, store: Any):
        self.store = store

    @classmethod
    def open(cls, setup: NodeSetup, leader: bool, connect_s: float) -> "NodeStore":
        """Host the store (leader) or connect to it; raises OSError/RuntimeError on failure."""
        preload()
        from torch.distributed import TCPStore

        store = TCPStore(setup.host, setup.port, None, leader,  # the server binds every address
                         dt.timedelta(seconds=connect_s), wait_for_workers=False)
        store.set_timeout(dt.timedelta(seconds=OP_TIMEOUT_S))
        return cls(store)

    def set(self, key: str, value: Any) -> None:
        self.store.set(PREFIX + key, json.dumps(value))

    def get(self, key: str) -> Any | None:
        """The value of ``key``, or None when it is not set (never blocks on a missing key)."""
        if not self.store.check([PREFIX + key]):
            return None
        return json.loads(self.store.get(PREFIX + key))

    def add(self, key: str, n: int) -> int:
        return int(self.store.add(PREFIX + key, n))

    def push(self, queue: str, item: dict[str, Any]) -> None:
        self.store.queue_push(PREFIX + queue, json.dumps(item))

    def pop_all(self, queue: str, limit: int = 64) -> list[dict[str, Any]]:
        """Up to ``limit`` items waiting in ``queue``, oldest first (bad items skipped)."""
        out = []
        for _ in range(min(limit, int(self.store.queue_len(PREFIX + queue)))):
            try:
                item = json.loads(self.store.queue_pop(PREFIX + queue, False))
            except ValueError:
                continue
            except Exception:  # noqa: BLE001 - torch's QueueEmptyError: drained meanwhile
                break
            if isinstance(item, dict):
                out.append(item)
        return out


def this_node_id(setup: NodeSetup) -> str:
    """A following node's name in messages and mirror dirs: its node rank, else host-pid."""
    if setup.node_rank is not None:
        return str(setup.node_rank)
    return f"{host_name()}-{os.getpid()}"
