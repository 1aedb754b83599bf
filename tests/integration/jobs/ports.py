"""A free TCP port for a job's rendezvous, chosen where no outgoing connection can take it."""

from __future__ import annotations

import random
import socket

EPHEMERAL = "/proc/sys/net/ipv4/ip_local_port_range"
SPAN = 12000  # how far below the ephemeral ports to look


def _ephemeral_low() -> int:
    """The kernel's lowest ephemeral port (32768 where it cannot be read)."""
    try:
        with open(EPHEMERAL) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port nothing is bound to now, below the kernel's ephemeral range.

    A port the kernel hands out for ``bind(0)`` is an ephemeral one: between its release here
    and rank 0's listen, any outgoing connection of the machine (gloo's pairs of another job)
    may take it as its local port, and rank 0 fails with EADDRINUSE. Below that range only an
    explicit bind takes a port. The draw uses its own generator: the caller's random state is
    left as it was."""
    low = _ephemeral_low()
    ports = range(max(1024, low - SPAN), low)
    for port in random.Random().sample(ports, min(200, len(ports))):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # every port tried is taken: an ephemeral one, as before
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
