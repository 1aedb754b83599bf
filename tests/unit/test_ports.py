"""The tests' rendezvous ports come from below the kernel's ephemeral range, free when chosen."""

from __future__ import annotations

import random
import socket

from tests.integration.jobs import ports


def test_a_port_below_the_ephemeral_range_that_binds() -> None:
    low = ports._ephemeral_low()
    state = random.getstate()
    chosen = {ports.free_port() for _ in range(20)}
    assert random.getstate() == state  # the caller's random state is left alone
    assert all(low - ports.SPAN <= p < low for p in chosen), (low, chosen)
    assert len(chosen) > 1  # drawn, not the same port to every caller
    for port in chosen:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_taken_port_is_not_chosen(monkeypatch) -> None:
    low = ports._ephemeral_low()
    holder = socket.socket()
    holder.bind(("127.0.0.1", low - 1))  # the only candidate, once the span is one port
    try:
        monkeypatch.setattr(ports, "SPAN", 1)
        assert ports.free_port() != low - 1
    finally:
        holder.close()
