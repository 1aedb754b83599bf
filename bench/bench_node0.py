"""Node 0 at scale: the live messages of 1,024 nodes of 8 ranks over the real nodes' channel,
taken by node 0 at no more than a quarter of one core and in bounded memory.

    python bench/bench_node0.py                        # 1024 nodes, 20 s: the budget check
    python bench/bench_node0.py --nodes 256 --seconds 10

Node 0 is a child process running the real ``NodeLeader`` on the real ``Hub`` (loopback,
a secret).  The nodes are simulated by a few sender processes holding many connections
each: every connection passes the channel's handshake (its own session), says hello,
reads node 0's beat, then sends what a following node sends while its job runs, as often as
node 0's beats ask (every 0.25 s with few nodes; node 0 asks for about 1,024 messages a
second in all: every 1 s at 1,024 nodes): its 8 ranks' progress, their ranks, no new
records (an empty delta), sealed with the secret.  Node 0's CPU time
(``time.process_time`` of its own process) over a window after every node joined, per
message it took, times the messages due a second, is the fraction of one core it needs (on
a machine too loaded to give it that much, it falls behind: the fraction taken says so);
its peak RSS is its memory.  Exits 1
past the budget (0.25 core), or when a node is lost or never joined.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddpdoctor.supervisor.node_follower import MAX_PUSH_EVERY_S, PUSH_EVERY_S  # noqa: E402

SECRET = "bench-secret-of-node-0-at-scale-0123456789"
RANKS_PER_NODE = 8
BUDGET_CORE = 0.25


def node0(port: int, nodes: int, seconds: float, out: "mp.Queue") -> None:
    """Node 0: the real leader; reports its CPU and memory over the window once every
    node joined."""
    from ddpdoctor.supervisor.node_auth import channel_key
    from ddpdoctor.supervisor.node_leader import NodeLeader
    from ddpdoctor.supervisor.node_store import NodeSetup, open_hub

    run_dir = Path(tempfile.mkdtemp(prefix="bench-node0-"))
    setup = NodeSetup("127.0.0.1", port, nodes + 1, 0)
    taken = [0]
    leader = NodeLeader(lambda: open_hub(setup, channel_key(SECRET), lambda *a: None),
                        lambda attempt: run_dir, lambda *a, **k: None, lambda *a, **k: None,
                        lost_after_s=120.0, expected=nodes)
    take = leader._take

    def counted(view, item):  # noqa: ANN001 - the leader's own method, counted
        taken[0] += 1
        take(view, item)

    leader._take = counted  # type: ignore[method-assign]
    leader.start()
    deadline = time.monotonic() + 600
    while len(leader.nodes) < nodes and time.monotonic() < deadline:
        time.sleep(0.2)
    joined = len(leader.nodes)
    time.sleep(2.0)  # every sender in its steady rhythm
    cpu0, wall0, n0 = time.process_time(), time.monotonic(), taken[0]
    out.put("window")
    time.sleep(seconds)
    cpu, wall, n = time.process_time() - cpu0, time.monotonic() - wall0, taken[0] - n0
    every = leader._beat()["every"]
    lost = sum(1 for v in leader.nodes.values() if v.lost)
    out.put({"joined": joined, "every_s": every, "cpu_s": cpu, "wall_s": wall,
             "messages": n, "lost": lost,
             "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
             "refused_connections": leader.hub.refused_connections})
    leader.close()


def senders(port: int, first: int, count: int, stop: "mp.Event", sent: "mp.Value") -> None:
    """``count`` simulated nodes on one process: connect, hello, then a report per node
    every PUSH_EVERY_S until ``stop``."""
    from ddpdoctor.supervisor.node_auth import channel_key
    from ddpdoctor.supervisor.node_link import NodeLink, connect

    links = []
    every = [PUSH_EVERY_S]

    def take(link: NodeLink) -> None:  # node 0's beats: how often it wants news
        for raw in link.receive(0):
            value = link.open(raw)[1]
            if isinstance(value, dict) and isinstance(value.get("every"), (int, float)):
                every[0] = min(MAX_PUSH_EVERY_S, max(PUSH_EVERY_S, value["every"]))

    key = channel_key(SECRET)
    for i in range(first, first + count):
        node = str(i + 1)
        link = connect("127.0.0.1", port, key, 300.0)
        link.send("hello", {"node": node, "host": f"h{node}"})
        ranks = list(range(i * RANKS_PER_NODE, (i + 1) * RANKS_PER_NODE))
        links.append((link, node, ranks))
    next_push = time.monotonic()
    while not stop.is_set():
        next_push += every[0]
        for link, node, ranks in links:
            take(link)
            now = time.time_ns()
            item = {"t": now, "host": f"h{node}", "attempt": 0,
                    "delta": {"rings": [], "files": []},
                    "progress": {str(r): {"progress_ns": now, "cpu_busy": False}
                                 for r in ranks},
                    "acks": [], "ranks": ranks}
            link.send("report", item)
        with sent.get_lock():
            sent.value += len(links)
        time.sleep(max(0.0, next_push - time.monotonic()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--processes", type=int, default=4, help="sender processes")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "integration" / "jobs"))
    from ports import free_port

    port = free_port()
    ctx = mp.get_context("spawn")
    out, stop, sent = ctx.Queue(), ctx.Event(), ctx.Value("q", 0)
    leader = ctx.Process(target=node0, args=(port, args.nodes, args.seconds, out))
    leader.start()
    time.sleep(1.0)
    per = -(-args.nodes // args.processes)
    procs = [ctx.Process(target=senders, args=(port, k, min(per, args.nodes - k), stop, sent))
             for k in range(0, args.nodes, per)]
    for p in procs:
        p.start()
    assert out.get(timeout=900) == "window"
    sent0 = sent.value
    result = out.get(timeout=900)
    sent_in_window = sent.value - sent0
    stop.set()
    for p in procs + [leader]:
        p.join(30)
    due_per_s = args.nodes / result["every_s"]
    per_msg_s = result["cpu_s"] / max(1, result["messages"])
    core = per_msg_s * due_per_s
    took = result["messages"] / max(1, sent_in_window)
    result["sent"] = sent_in_window
    print(json.dumps({**result, "nodes": args.nodes, "ranks": args.nodes * RANKS_PER_NODE,
                      "cpu_us_per_message": round(per_msg_s * 1e6, 1),
                      "due_per_s": round(due_per_s), "core_fraction": round(core, 3),
                      "measured_core_fraction": round(result["cpu_s"] / result["wall_s"], 3),
                      "taken_fraction": round(took, 3), "load": os.getloadavg()[0]}))
    print(f"node 0, {args.nodes} nodes x {RANKS_PER_NODE} ranks: {per_msg_s * 1e6:.0f} us of "
          f"CPU a message x {due_per_s:.0f} messages/s due = {core:.3f} of one core (budget "
          f"{BUDGET_CORE}); peak RSS {result['peak_rss_mb']:.0f} MB; took {took:.0%} of "
          f"those sent in the window (load average {os.getloadavg()[0]:.1f}); "
          f"{result['lost']} node(s) lost")
    return 0 if core <= BUDGET_CORE and result["lost"] == 0 and \
        result["joined"] == args.nodes else 1


if __name__ == "__main__":
    sys.exit(main())
