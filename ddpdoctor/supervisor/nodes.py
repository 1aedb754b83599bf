"""Nodes: the supervisor's part in a many-node job: lead (node 0) or follow, or decide alone.

The nodes talk over the nodes' channel (node_channel), whose every connection proves the
job's secret (``DDPDOCTOR_STORE_SECRET`` or ``--node-secret-file``, the same on every
node; checked before the job starts: node_secret) and whose every message is sealed with
it.  With ``--insecure-node-channel`` the key is a constant anyone knows: every node says
so.  When node 0 cannot be reached, a node decides alone (its own report).  With one node
this part holds nothing and every call returns at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ddpdoctor.analysis.causal.verdict import report_grace_s
from ddpdoctor.analysis.model import JobView
from ddpdoctor.config import RunConfig
from ddpdoctor.host import host_name
from ddpdoctor.supervisor.attempt_watch import AttemptWatch
from ddpdoctor.supervisor.capture import capture_pids, capture_ranks
from ddpdoctor.supervisor.node_auth import channel_key
from ddpdoctor.supervisor.node_follower import NodeFollower
from ddpdoctor.supervisor.node_leader import NodeLeader
from ddpdoctor.supervisor.node_secret import INSECURE_WARNING, NodeSecret
from ddpdoctor.supervisor.node_store import NodeSetup, open_hub, this_node_id
from ddpdoctor.trace.world import world_size

STACKS_WAIT_S = 15.0  # py-spy on the other nodes, then their copy


class Nodes:
    """The other nodes, as this node's supervisor sees them.

    Args:
        config: the run's configuration (its hang timeout bounds every wait here).
        say: the supervisor's console notices.
        current: the watch of the attempt that runs now (its log, its ranks).
        run_dir_of: attempt -> the run dir the other nodes' copies of it go into.
    """

    def __init__(self, config: RunConfig, say: Callable[..., None],
                 current: Callable[[], AttemptWatch],
                 run_dir_of: Callable[[int], Path]) -> None:
        self.config = config
        self.say = say
        self.current = current
        self.run_dir_of = run_dir_of
        self.leader: NodeLeader | None = None
        self.follower: NodeFollower | None = None
        self.address = ""
        self._follow_said = False
        self._membership: tuple[int, int] | None = None  # (nodes, world size) last logged

    @property
    def many(self) -> bool:
        """Does this supervisor lead or follow other nodes?"""
        return self.leader is not None or self.follower is not None

    def _log(self, event: str, **fields: Any) -> None:
        self.current().log(event, **fields)

    def _where(self) -> tuple[int, Path]:
        watch = self.current()
        return watch.attempt, watch.run_dir

    # -- joining ------------------------------------------------------------------------
    def open(self, setup: NodeSetup | None, secret: NodeSecret | None = None) -> None:
        """Join the other nodes' supervisors (nothing for a one-node job: no port)."""
        if setup is None:
            return
        if secret is None:  # checked by run_job before the job started
            self._alone("no secret for the nodes' channel")
            return
        if secret.insecure:
            self.say(INSECURE_WARNING, "red")
            self._log("node_channel", insecure=True)
        # a node silent this long is lost; a node never heard of gets as long (the verdict)
        lost_after = report_grace_s(self.config.hang_timeout)
        lead = setup.leader
        key = channel_key(secret.value)
        if lead is None:  # no node rank: whoever binds the port first leads
            try:
                hub = open_hub(setup, key, self._store_refused)
            except Exception:  # noqa: BLE001 - the port is taken: another node leads
                hub = None
            if hub is not None:
                self._lead(setup, key, lost_after, hub)
                return
        elif lead:
            self._lead(setup, key, lost_after)  # the channel opens in the leader's thread
            return
        self.follower = NodeFollower(setup, this_node_id(setup), self._where, lost_after,
                                     secret.value, self._log)
        self.follower.start()
        self.say(f"following node 0 through {setup.address}: it decides and "
                 "writes the job's one report")

    def _lead(self, setup: NodeSetup, key: bytes, lost_after: float,
              hub: Any = None) -> None:
        """Node 0: the leader, on ``hub`` when this node already bound the port."""
        self.leader = NodeLeader(lambda: hub if hub is not None else
                                 open_hub(setup, key, self._store_refused),
                                 self.run_dir_of, self.say, self._log, lost_after,
                                 expected=max(0, setup.min_nodes - 1))
        self.leader.start()
        self.address = setup.address
        self.say(f"node 0 of {setup.nnodes}: the other nodes report here through "
                 f"{setup.address}; the job's one report is written here")

    def _store_refused(self, key: str, why: str, count: int) -> None:
        """A message that is not this job's supervisors': dropped, logged."""
        self._log("store_refused", key=key[:128], why=why, count=count)

    def _alone(self, why: str) -> None:
        self.say(f"{why}; this node decides alone and writes its own report", "yellow")
        self.current().live.problems.append(
            f"many nodes: {why}; this report covers this node only")

    # -- each look ----------------------------------------------------------------------
    def check_leader(self) -> None:
        """Node 0 whose store could not be hosted: said once; it decides for itself."""
        if self.leader is not None and self.leader.failed is not None:
            why = self.leader.failed
            self.leader = None
            self._alone(f"cannot listen for the other nodes at {self.address} ({why})")

    @property
    def following(self) -> bool:
        """Does node 0 decide for this node now?"""
        f = self.follower
        if f is None:
            return False
        if not f.linked and not self._follow_said:
            self._follow_said = True
            if f.unproven:  # another program holds node 0's port: said as an error
                self.say(f"error: {f.failed}", "red")
            self._alone(f.failed or "lost node 0")
        return f.linked

    def node0_verdict(self) -> dict[str, Any] | None:
        """Node 0's verdict when it stops the job (a follower stops with it), else None."""
        v = self.follower.verdict if self.follower is not None else None
        return v if isinstance(v, dict) and v.get("stop") else None

    def serve(self, watch: AttemptWatch) -> None:
        """Each poll: hand this node's progress to the link, answer node 0's stack asks."""
        f = self.follower
        if f is None or not f.linked:
            return
        local = watch.live.local_ranks()
        f.ranks = sorted(local)
        f.progress = watch.progress.event()
        while f.asks:
            n, ranks = f.asks.pop(0)
            live = {r: p for r, p in local.items() if not p.gone}
            if ranks is None:  # node 0's verdict: the dumps and connections too
                capture_ranks(watch.run_dir, live, "node 0 asked", watch.log)
            else:
                capture_pids(watch.run_dir, [p.header.pid for r, p in live.items()
                                             if r in ranks], "node 0 asked", watch.log)
            f.answered(n)

    def check_membership(self, watch: AttemptWatch, final: bool = False) -> None:
        """Nodes and world size: recorded when first known and at every change (an elastic
        job's node joining or leaving, a restart with another world size); ``final``, as
        the report is written: a job whose ranks all ran between two looks gets it too."""
        if self.follower is not None and self.follower.linked:
            return  # node 0 records it for the whole job
        ranks = [p for p in watch.live.ranks().values() if not p.gone]
        if not ranks and final and self._membership is None:
            ranks = list(watch.live.ranks().values())
        world = world_size((p.header.rank, p.header.world_size) for p in ranks)
        if world <= 0:
            return
        members = self.leader.members() if self.leader is not None else None
        now = (len(members) if members else 1, world)
        if now == self._membership:
            return
        if self._membership is not None:
            self.say(f"membership changed: {now[0]} node(s), world size {world} (was "
                     f"{self._membership[0]} node(s), world size {self._membership[1]})",
                     "yellow")
        self._membership = now
        watch.log("membership", nodes=now[0], world_size=world, attempt=watch.attempt,
                  members=members or ["0"])

    # -- what a watch asks of them (attempt_watch.NodeLink) ------------------------------
    def remote_stacks(self, ranks: list[int] | None) -> None:
        """Node 0: the other nodes' stacks (of ``ranks``, or all), copied here."""
        if self.leader is None:
            return
        local = set(self.current().live.local_ranks())
        if ranks is not None:
            ranks = [r for r in ranks if r not in local]
            if not ranks:
                return
        try:
            late = self.leader.wait_acks(self.leader.request_stacks(ranks), STACKS_WAIT_S)
        except Exception as e:  # noqa: BLE001 - the report goes on without them
            late = [f"({type(e).__name__})"]
        if late:
            self._log("stacks_missing", nodes=late)

    def apply_progress(self, job: JobView) -> None:
        if self.leader is not None:
            self.leader.apply_progress(job)

    def skews(self) -> dict[str, int]:
        if self.leader is None:
            return {}
        return {v.host: v.skew_ns for v in list(self.leader.nodes.values())
                if v.host and v.skew_ns is not None}

    # -- the ending ---------------------------------------------------------------------
    def publish_verdict(self, reason: str, message: str, stop: bool, exit_code: int) -> None:
        if self.leader is not None:
            try:
                self.leader.publish_verdict(reason, message, stop, exit_code)
            except Exception as e:  # noqa: BLE001
                self.current().live.problems.append(f"could not tell the other nodes: {e}")

    def wait_done(self) -> None:
        """Node 0, its job ended: the other nodes' last copies before the report."""
        if self.leader is None:
            return
        late = self.leader.wait_done(max(10.0, self.config.hang_timeout))
        if late:
            self.leader.mark_lost(late)  # the report names their ranks unreachable

    def listed(self) -> tuple[tuple[dict[str, Any], ...], tuple[str, ...]] | None:
        """Node 0: the report's ``nodes`` (this one first) and the other nodes' problems
        (and a word on nodes the job needs that never came); None with one node."""
        if self.leader is None:
            return None
        nodes = ({"node": "0", "host": host_name(), "lost": False}, *self.leader.summary())
        missing = self.leader.expected - len(self.leader.nodes)
        unheard = [f"{missing} node(s) the job needs (--nnodes) never reached node 0: "
                   "their ranks are not in this report"] if missing > 0 else []
        return nodes, tuple(self.leader.problems + unheard)

    def announce(self, report_path: Path | None, outcome: str | None) -> None:
        """Node 0: the report is written; tell the others where, and close the channel."""
        if self.leader is None:
            return
        try:
            self.leader.publish_final(str(report_path) if report_path is not None else None,
                                      outcome, host_name())
        except Exception:  # noqa: BLE001 - nobody to tell
            pass
        self.leader.close()

    def follow_end(self, watch: AttemptWatch, exit_code: int | None) -> bool:
        """A follower whose job ended (or was stopped): send the last copy and wait for node
        0's report.  True when node 0 wrote it (this node writes none)."""
        f = self.follower
        if f is None or not f.linked:
            return False
        self.serve(watch)
        final = f.finish(exit_code, self.config.hang_timeout + 30.0)
        f.close()
        if final is None:
            self._alone(f.failed or "node 0 sent no report in time")
            return False
        watch.log("report_on_node_0", report=final.get("report"), outcome=final.get("outcome"),
                  host=final.get("host"))
        self.say(f"the job's report is on node 0 (host {final.get('host')}): "
                 f"{final.get('report')}")
        return True
