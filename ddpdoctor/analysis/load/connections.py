"""The ranks' TCP connections as the supervisor captured them at the verdict, typed.

Each rank's capture sits in the stacks dir beside its trace's run dir (a node's mirror
on node 0 has the same layout), named by its pid; a rank without one (no verdict, another
run dir layout, a damaged file) has no connections here."""

from __future__ import annotations

from ddpdoctor.analysis.load.links import LinkFacts, RankSocket, link_facts
from ddpdoctor.analysis.model import JobView
from ddpdoctor.proc.sockets import SOCKETS_FILE, SocketCapture
from ddpdoctor.rundir.layout import read_json_object


def rank_sockets(job: JobView) -> list[RankSocket]:
    """Every captured TCP socket of every rank, with the rank and its host."""
    out = []
    for rank, run in sorted(job.ranks.items()):
        run_dir = run.trace.path.parent.parent  # RUN_DIR/traces/pid-N.ring
        found = SocketCapture.from_dict(read_json_object(
            run_dir / "stacks" / SOCKETS_FILE.format(pid=run.pid)))
        if found is None or found.pid != run.pid:
            continue
        out += [RankSocket(rank, str(run.header.host), s) for s in found.sockets]
    return out


def job_link_facts(job: JobView) -> LinkFacts:
    """The ranks' connections and their stalled directions (none without captures)."""
    return link_facts(rank_sockets(job))
