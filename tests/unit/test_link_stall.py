"""A link that stopped: the kernel's socket state read, the stalled directions told from
typed socket facts, and a call stalled on them named with its link, no rank blamed."""

from __future__ import annotations

import json
import os
import socket
import struct
from dataclasses import replace
from pathlib import Path

from ddpdoctor.analysis.causal.diagnose import diagnose
from ddpdoctor.analysis.causal.facts import rank_states
from ddpdoctor.analysis.causal.graph import wait_for_graph
from ddpdoctor.analysis.load.links import Link, RankSocket, link_facts, stalled_links
from ddpdoctor.analysis.causal.stall import stalled_behind, stalled_call
from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import Finding, RankRun, Severity
from ddpdoctor.proc.sockets import (SOCKETS_FILE, SocketCapture, TcpSocket, capture,
                                    parse_diag_message, parse_proc_tcp)
from ddpdoctor.trace import layout as L
from tests.unit.factory import job, rank, rec, steps

BUCKET = int(L.RecordFlag.BUCKET)
A, B = "10.9.0.1", "10.9.0.2"


def sock(local: str, remote: str, tx: int = 0, timer: str = "off", retransmits: int = 0,
         **kernel: int) -> TcpSocket:
    return TcpSocket(1, local, remote, "established", tx, 0, retransmits, timer, **kernel)


def blackholed_pair(held: int = 1_200_000) -> list[RankSocket]:
    """Host A cannot send to B (a blackhole route): rank 0's bytes never leave A, rank 1's
    reach A but A's acknowledgements do not reach B."""
    return [
        RankSocket(0, "host-a", sock(f"{A}:5000", f"{B}:6000", held, "zero_window_probe", 6,
                                     notsent_bytes=held, snd_wnd=1 << 20, bytes_acked=9000,
                                     bytes_received=7096, last_data_recv_ms=41_200,
                                     last_ack_recv_ms=900)),
        RankSocket(1, "host-b", sock(f"{B}:6000", f"{A}:5000", 96, "retransmit", 7,
                                     notsent_bytes=0, bytes_acked=7001, bytes_received=9000,
                                     last_data_recv_ms=41_900)),
        RankSocket(1, "host-b", sock(f"{B}:6001", "10.9.1.1:29400")),  # the store: healthy
    ]


def bucket_call(seq: int, t: float, open_: bool = True) -> list:
    return [rec(seq, t=t, dur=None if open_ else 0.01, flags=BUCKET)]


def ring_recv(parent: int, peer: int, t: float) -> object:
    return replace(rec(0, "ring_recv", t=t, dur=None, peer=peer, flags=int(L.RecordFlag.RECV),
                       kind=L.RecordKind.RING_STEP), parent=parent)


def two_hosts(runs: list[RankRun]) -> list[RankRun]:
    for run in runs:
        run.trace.header = replace(run.header, host=("host-a", "host-b")[run.rank])
    return runs


def errors(found: list[Finding]) -> list[Finding]:
    return [f for f in found if f.severity == Severity.ERROR]


def with_captures(runs: list[RankRun], run_dir: Path, sockets: list[RankSocket]) -> None:
    """Each rank's trace in ``run_dir`` and its sockets in stacks/, as the supervisor
    writes them at a verdict."""
    (run_dir / "stacks").mkdir(parents=True, exist_ok=True)
    for run in runs:
        run.trace.path = run_dir / "traces" / f"pid-{run.pid}.ring"
        mine = tuple(s.socket for s in sockets if s.rank == run.rank)
        (run_dir / "stacks" / SOCKETS_FILE.format(pid=run.pid)).write_text(
            json.dumps(SocketCapture(run.pid, 1, "sock_diag", mine).to_dict()))


# -- the kernel's tables ------------------------------------------------------------------
def test_proc_tcp_lines_give_addresses_queues_retransmits_and_timer() -> None:
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
        "timeout inode\n"
        "   0: 0100090A:1388 0200090A:1770 01 00012078:00000010 01:0000008C 00000005     0"
        "        0 4242 2 0000000000000000 20 0 0 10 -1\n"
        "   1: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0"
        "        0 99 1 0000000000000000 100 0 0 10 0\n")
    [s] = parse_proc_tcp(table)  # the listening socket is left out
    assert (s.local, s.remote, s.state) == (f"{A}:5000", f"{B}:6000", "established")
    assert (s.tx_queue, s.rx_queue, s.retransmits, s.timer, s.inode) == \
        (0x12078, 16, 5, "retransmit", 4242)
    mapped = "0000000000000000FFFF00000100090A:1388 0000000000000000FFFF00000200090A:1770"
    [v6] = parse_proc_tcp("head\n 0: " + mapped + " 01 00000000:00000000 00:00000000 "
                          "00000000 0 0 7 1\n")
    assert (v6.local, v6.remote) == (f"{A}:5000", f"{B}:6000")  # IPv4-mapped: as IPv4


def test_a_sock_diag_message_gives_tcp_info_fields_and_a_short_struct_leaves_them_out() -> None:
    info = bytearray(248)
    struct.pack_into("=B", info, 4, 3)  # backoff
    struct.pack_into("=IIII", info, 44, 11, 0, 41_000, 900)  # last data sent/.../ack recv
    struct.pack_into("=QQ", info, 120, 9000, 7096)  # bytes acked, received
    struct.pack_into("=I", info, 144, 4096)  # notsent
    struct.pack_into("=I", info, 228, 65536)  # snd_wnd
    attr = struct.pack("=HH", 4 + len(info), 2) + bytes(info)
    msg = struct.pack("=BBBB", socket.AF_INET, 1, 4, 6) + (5000).to_bytes(2, "big") + \
        (6000).to_bytes(2, "big") + socket.inet_aton(A) + bytes(12) + socket.inet_aton(B) + \
        bytes(12) + struct.pack("=I8sIIIII", 0, bytes(8), 0, 3, 4096, 0, 4242)
    s = parse_diag_message(msg + attr)
    assert s is not None
    assert (s.local, s.remote, s.timer, s.retransmits, s.tx_queue) == \
        (f"{A}:5000", f"{B}:6000", "zero_window_probe", 6, 4096)
    assert (s.backoff, s.last_data_recv_ms, s.last_ack_recv_ms, s.bytes_acked,
            s.bytes_received, s.notsent_bytes, s.snd_wnd) == (3, 41_000, 900, 9000, 7096,
                                                               4096, 65536)
    old_kernel = struct.pack("=HH", 4 + 104, 2) + bytes(info[:104])
    short = parse_diag_message(msg + old_kernel)
    assert short is not None and short.last_data_recv_ms == 41_000
    assert short.bytes_acked is None and short.snd_wnd is None


def test_this_process_connection_is_captured_with_both_ends_and_survives_its_file() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    near, _ = server.accept()
    try:
        client.sendall(b"x" * 1000)
        assert near.recv(4096)
        found = capture(os.getpid())
        assert found.error is None and found.source in ("sock_diag", "proc")
        ends = {(s.local, s.remote) for s in found.sockets}
        me = "%s:%d" % client.getsockname()
        assert (me, "%s:%d" % server.getsockname()) in ends
        mine = next(s for s in found.sockets if s.local == me)
        if found.source == "sock_diag":
            assert mine.bytes_acked is not None and mine.bytes_acked >= 1000
        again = SocketCapture.from_dict(json.loads(json.dumps(found.to_dict())))
        assert again == found
    finally:
        for s in (client, near, server):
            s.close()
    gone = capture(2 ** 22 + 12345)  # no such process: said, not raised
    assert gone.error and not gone.sockets


# -- stalled directions -------------------------------------------------------------------
def test_a_blackholed_path_is_one_link_both_directions_point_at() -> None:
    links = stalled_links(blackholed_pair())
    assert [(k.from_rank, k.to_rank, k.arrived) for k in links] == [(0, 1, False),
                                                                     (1, 0, True)]
    assert {k.path for k in links} == {("host-a", "host-b")}
    assert links[0].idle_s == 41.9  # rank 1 (the receiver) got nothing new for 41.9 s
    assert links[1].idle_s == 41.2
    assert set(links[0].to_dict()) >= {"from_rank", "to_rank", "from_host", "to_host",
                                       "unacked_bytes", "idle_s"}


def test_healthy_and_zero_window_sockets_are_no_stalled_link() -> None:
    healthy = [RankSocket(0, "host-a", sock(f"{A}:5000", f"{B}:6000", 4096, "retransmit")),
               RankSocket(1, "host-b", sock(f"{B}:6000", f"{A}:5000"))]
    not_read = [RankSocket(0, "host-a", sock(f"{A}:5000", f"{B}:6000", 4096,
                                             "zero_window_probe", 3, snd_wnd=0))]
    assert stalled_links(healthy) == [] and stalled_links(not_read) == []


def test_a_peer_whose_host_was_not_captured_is_named_by_its_address() -> None:
    only_a = [s for s in blackholed_pair() if s.rank == 0] + \
        [RankSocket(2, "host-b", sock(f"{B}:7000", f"{A}:7001"))]  # another rank on B
    [k] = stalled_links(only_a)
    assert (k.to_rank, k.to_host, k.arrived, k.idle_s) == (None, "host-b", None, 0.9)


# -- the decision ---------------------------------------------------------------------------
def test_every_rank_inside_the_bucket_with_a_stalled_link_is_a_stalled_call_naming_it() -> None:
    runs = two_hosts([rank(r, steps(3) + bucket_call(3, 4), host="h") for r in (0, 1)])
    j = job(runs)
    found = stalled_call(j, rank_states(j), link_facts(blackholed_pair()))
    assert found is not None and found.kind == "stalled_call" and found.ranks == (0, 1)
    assert found.summary == ("all_reduce (DDP bucket 0) stalled on the link host-a -> host-b: "
                             "2 connections hold 1.2 MB unacknowledged, idle 41 s; no rank is "
                             "at fault")
    assert [(k["from_rank"], k["to_rank"], k["from_host"], k["to_host"])
            for k in found.evidence["links"]] == [(0, 1, "host-a", "host-b"),
                                                  (1, 0, "host-b", "host-a")]
    assert "ip route get 10.9.0.2" in found.fix and "no route" in found.detail
    assert [(c["rank"], c["peer"], c["stalled"]) for c in found.evidence["connections"]] == \
        [(0, 1, True), (1, 0, True)]  # the store's connection is no peer's
    plain = stalled_call(j, rank_states(j), link_facts([]))
    assert plain is not None and "none returns" in plain.summary  # one host: as before


def test_ranks_behind_in_a_matched_bucket_on_a_stalled_link_are_no_ones_fault() -> None:
    """Rank 0's part of bucket 3 sat in its kernel; rank 0 had rank 1's part, finished it
    and waits in bucket 4 for rank 1, which never got rank 0's."""
    runs = two_hosts([rank(0, steps(3) + bucket_call(3, 4, open_=False) + bucket_call(4, 5)),
                      rank(1, steps(3) + bucket_call(3, 4))])
    j = job(runs)
    states = rank_states(j)
    found = stalled_behind(j, states, wait_for_graph(j, states),
                           link_facts(blackholed_pair()))
    assert found is not None and found.ranks == (0, 1) and found.seq == 3
    assert found.evidence["behind"] == [1]
    assert "Rank 0 finished it, went on to" in found.detail
    assert stalled_behind(j, states, wait_for_graph(j, states), link_facts([])) is None


def test_diagnose_reads_the_captures_and_blames_no_rank(tmp_path: Path) -> None:
    runs = two_hosts([rank(0, steps(3) + bucket_call(3, 4, open_=False) + bucket_call(4, 5)),
                      rank(1, steps(3) + bucket_call(3, 4))])
    before = errors(analyze(job(runs), []))
    assert before[0].kind == "missing_collective" and before[0].ranks == (1,)  # no captures
    with_captures(runs, tmp_path, blackholed_pair())
    found = errors(analyze(job(runs), []))
    assert [(f.kind, f.ranks) for f in found] == [("stalled_call", (0, 1))]
    assert "host-a -> host-b" in found[0].summary
    live = job(runs, outcome=None, live=True)  # before a verdict: nothing said yet
    assert not [f for f in diagnose(live).findings if f.kind == "stalled_call"]


def test_an_open_ring_receive_from_a_sender_inside_the_same_call_blames_no_one() -> None:
    """Today's wrong answer was 'rank 0 never received segment 0 of bucket 0 from rank 3'."""
    runs = [rank(r, steps(3) + bucket_call(3, 4) + [ring_recv(3, (r - 1) % 4, 4.1 + r)],
                 world=4) for r in range(4)]
    found = errors(analyze(job(runs), []))
    assert [(f.kind, f.ranks) for f in found] == [("stalled_call", (0, 1, 2, 3))]
    assert "rank 0 waits for segment 0 from rank 3" in found[0].detail
    stopped = [rank(0, steps(3) + bucket_call(3, 4) + [ring_recv(3, 1, 4.1)]),
               rank(1, steps(3) + bucket_call(3, 4))]
    stopped[1].proc_state = "T"  # SIGSTOPped inside the call: the sender that stopped
    found = errors(analyze(job(stopped), []))
    assert found[0].kind == "missing_collective" and found[0].ranks == (1,)
    assert "never received segment 0 of bucket 0 from rank 1" in found[0].summary


def test_links_in_the_finding_round_trip_as_the_contract_names_them() -> None:
    k = Link(0, 1, "host-a", "host-b", f"{A}:1", f"{B}:2", 10, 1.5, 2)
    assert {key: k.to_dict()[key] for key in ("from_rank", "to_rank", "from_host",
                                              "to_host", "unacked_bytes", "idle_s")} == \
        {"from_rank": 0, "to_rank": 1, "from_host": "host-a", "to_host": "host-b",
         "unacked_bytes": 10, "idle_s": 1.5}


def test_a_stalled_connection_to_a_service_outside_the_job_is_not_its_link() -> None:
    runs = two_hosts([rank(r, steps(3) + bucket_call(3, 4)) for r in (0, 1)])
    j = job(runs)
    outside = link_facts([RankSocket(0, "host-a", sock(f"{A}:5000", "203.0.113.7:443",
                                                       5000, "retransmit", 4))])
    assert outside.links and outside.links[0].to_host == "203.0.113.7"
    found = stalled_call(j, rank_states(j), outside)
    assert found is not None and "none returns" in found.summary
    assert "links" not in found.evidence


def test_the_supervisor_writes_what_the_analysis_reads(tmp_path: Path) -> None:
    from ddpdoctor.analysis.load.connections import rank_sockets
    from ddpdoctor.supervisor.capture import capture_connections

    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    near, _ = server.accept()
    try:
        run = rank(0)
        run.trace.header = replace(run.header, pid=os.getpid())
        run.trace.path = tmp_path / "traces" / f"pid-{os.getpid()}.ring"
        capture_connections([os.getpid()], tmp_path / "stacks")
        me = "%s:%d" % client.getsockname()
        found = rank_sockets(job([run], world=1))
        assert any(s.rank == 0 and s.socket.local == me for s in found)
    finally:
        for s in (client, near, server):
            s.close()
