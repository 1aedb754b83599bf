"""The shared-memory ring's stream between two ends in one process (two threads, real
sockets and memfds): results, a peer that leaves after its part, and one that never came."""

from __future__ import annotations

import mmap
import os
import socket
import threading
import time
from typing import Any

import pytest
import torch

from ddpdoctor.ddp import shm_link
from ddpdoctor.ddp.shm_link import SLOT_BYTES, SLOTS, LinkBroken, Links, _Wire
from ddpdoctor.ddp.shm_ring import shm_gather_ring


def _memfd() -> int:
    fd = os.memfd_create("test-ring")
    os.ftruncate(fd, SLOTS * SLOT_BYTES)
    return fd


def linked_pair() -> tuple[Links, Links]:
    """Rank 0's and rank 1's links of a two-rank ring, wired to each other."""
    a_out, b_in = socket.socketpair()
    b_out, a_in = socket.socketpair()
    fa, fb = _memfd(), _memfd()
    size = SLOTS * SLOT_BYTES
    a = Links(_Wire(a_out, 1), _Wire(a_in, 1), mmap.mmap(fa, size), mmap.mmap(fb, size), 30)
    b = Links(_Wire(b_out, 0), _Wire(b_in, 0), mmap.mmap(fb, size), mmap.mmap(fa, size), 30)
    os.close(fa)
    os.close(fb)
    return a, b


def _run(links: Links, rank: int, x: torch.Tensor, out: dict[int, Any],
         reduce: Any = torch.Tensor.add_) -> None:
    try:
        shm_gather_ring(x, links, 2, rank, reduce, None, None)
        out[rank] = x
    except Exception as exc:  # noqa: BLE001 - the test reads it
        out[rank] = exc


def _both(a: Links, b: Links, xa: torch.Tensor, xb: torch.Tensor,
          reduce_b: Any = torch.Tensor.add_) -> dict[int, Any]:
    out: dict[int, Any] = {}
    ta = threading.Thread(target=_run, args=(a, 0, xa, out))
    tb = threading.Thread(target=_run, args=(b, 1, xb, out, reduce_b))
    ta.start()
    tb.start()
    ta.join(30)
    tb.join(30)
    return out


@pytest.mark.parametrize("numel", [1, 1000, SLOT_BYTES // 4 * 3 + 5])  # 1 piece; 4 pieces
def test_both_ends_hold_the_sum_call_after_call(numel: int) -> None:
    a, b = linked_pair()
    g = torch.Generator().manual_seed(0)
    for _ in range(3):  # the slot counters and credits carry over between calls
        xa, xb = torch.randn(numel, generator=g), torch.randn(numel, generator=g)
        want = xa + xb
        out = _both(a, b, xa.clone(), xb.clone())
        assert torch.equal(out[0], want) and torch.equal(out[1], want)


def test_a_peer_that_leaves_after_its_part_does_not_fail_the_other() -> None:
    """The end of a healthy job: rank 0 has all it needs and exits while rank 1 still
    reduces; rank 1's 'slot free' answers go to a closed socket, and that is no error."""
    a, b = linked_pair()
    numel = SLOT_BYTES // 4 * 3  # three pieces through two slots

    def slow_add(mine: torch.Tensor, theirs: torch.Tensor) -> Any:
        time.sleep(0.2)
        return mine.add_(theirs)

    out: dict[int, Any] = {}
    xa, xb = torch.ones(numel), torch.full((numel,), 2.0)

    def rank0() -> None:
        _run(a, 0, xa, out)
        a.out.close()  # the process exits: both its sockets close
        a.into.close()

    ta = threading.Thread(target=rank0)
    tb = threading.Thread(target=_run, args=(b, 1, xb, out, slow_add))
    ta.start()
    tb.start()
    ta.join(30)
    tb.join(30)
    assert not isinstance(out[0], Exception) and not isinstance(out[1], Exception), out
    assert torch.equal(out[1], torch.full((numel,), 3.0))


def test_a_peer_that_never_sends_is_named_when_it_leaves() -> None:
    a, b = linked_pair()
    out: dict[int, Any] = {}
    tb = threading.Thread(target=_run, args=(b, 1, torch.ones(10), out))
    tb.start()
    time.sleep(0.2)
    a.out.close()
    a.into.close()
    tb.join(30)
    assert isinstance(out[1], LinkBroken)
    assert "connection closed by peer rank 0" in str(out[1])
    with pytest.raises(LinkBroken, match="closed by peer rank 0"):  # and stays broken
        shm_gather_ring(torch.ones(10), b, 2, 1, torch.Tensor.add_, None, None)


def test_the_transport_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPDOCTOR_RING_TRANSPORT", "gloo")
    assert not shm_link.wanted()
    monkeypatch.setenv("DDPDOCTOR_RING_TRANSPORT", "auto")
    assert shm_link.wanted()
