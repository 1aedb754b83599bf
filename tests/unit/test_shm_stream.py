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
from ddpdoctor.ddp.shm_ring import shm_ring


def _memfd() -> int:
    fd = os.memfd_create("test-ring")
    os.ftruncate(fd, SLOTS * SLOT_BYTES)
    return fd


def linked_ring(n: int) -> list[Links]:
    """Each rank's links of an ``n``-rank ring, wired to its neighbours'."""
    size = SLOTS * SLOT_BYTES
    fds = [_memfd() for _ in range(n)]  # rank r's out slots
    wires = [socket.socketpair() for _ in range(n)]  # pair r: r's out end, r+1's in end
    ring = [Links(_Wire(wires[r][0], (r + 1) % n), _Wire(wires[(r - 1) % n][1], (r - 1) % n),
                  mmap.mmap(fds[r], size), mmap.mmap(fds[(r - 1) % n], size), 30)
            for r in range(n)]
    for fd in fds:
        os.close(fd)
    return ring


def _run(links: Links, rank: int, x: torch.Tensor, out: dict[int, Any],
         reduce: Any = torch.Tensor.add_) -> None:
    try:
        shm_ring(x, links, 2, rank, reduce, None, None, True)
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
    a, b = linked_ring(2)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):  # the slot counters and credits carry over between calls
        xa, xb = torch.randn(numel, generator=g), torch.randn(numel, generator=g)
        want = xa + xb
        out = _both(a, b, xa.clone(), xb.clone())
        assert torch.equal(out[0], want) and torch.equal(out[1], want)


@pytest.mark.parametrize("n,gather", [(3, True), (3, False), (4, False), (5, False)])
@pytest.mark.parametrize("numel", [2, 1001, SLOT_BYTES // 4 * 5 + 3])  # empty chunks too
def test_every_ring_gives_every_rank_the_same_sum(n: int, gather: bool, numel: int) -> None:
    ring = linked_ring(n)
    g = torch.Generator().manual_seed(n)
    xs = [torch.randn(numel, generator=g, dtype=torch.float64) for _ in range(n)]
    out: dict[int, Any] = {}

    def rank(r: int) -> None:
        try:
            x = xs[r].clone()
            shm_ring(x, ring[r], n, r, torch.Tensor.add_, None, 0.5, gather)
            out[r] = x
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out[r] = exc

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    want = torch.stack(xs).sum(0) * 0.5
    for r in range(n):
        assert torch.allclose(out[r], want, rtol=1e-12, atol=1e-12), (r, out[r])
        assert torch.equal(out[r], out[0])  # the same bits everywhere


def test_a_peer_that_leaves_after_its_part_does_not_fail_the_other() -> None:
    """The end of a healthy job: rank 0 has all it needs and exits while rank 1 still
    reduces; rank 1's 'slot free' answers go to a closed socket, and that is no error."""
    a, b = linked_ring(2)
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
    a, b = linked_ring(2)
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
        shm_ring(torch.ones(10), b, 2, 1, torch.Tensor.add_, None, None, True)


def test_the_transport_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPDOCTOR_RING_TRANSPORT", "gloo")
    assert not shm_link.wanted()
    monkeypatch.setenv("DDPDOCTOR_RING_TRANSPORT", "auto")
    assert shm_link.wanted()


def test_an_interrupted_call_leaves_the_links_broken_by_name() -> None:
    """A KeyboardInterrupt (no message) mid-call: the stream's place is lost, so every
    later call on the links says why instead of mixing up pieces."""
    a, b = linked_ring(2)

    def interrupted(mine: torch.Tensor, theirs: torch.Tensor) -> Any:
        raise KeyboardInterrupt

    out: dict[int, Any] = {}

    def rank1() -> None:
        try:
            shm_ring(torch.ones(10), b, 2, 1, interrupted, None, None, True)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            out[1] = exc

    ta = threading.Thread(target=_run, args=(a, 0, torch.ones(10), out))
    tb = threading.Thread(target=rank1)
    ta.start()
    tb.start()
    ta.join(30)
    tb.join(30)
    assert isinstance(out[1], KeyboardInterrupt)
    with pytest.raises(LinkBroken, match="KeyboardInterrupt"):
        shm_ring(torch.ones(10), b, 2, 1, torch.Tensor.add_, None, None, True)
