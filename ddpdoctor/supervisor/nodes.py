"""The Supervisor's part in a many-node job: lead (node 0) or follow, or decide alone.

The nodes talk over the nodes' channel (node_channel), whose every connection proves the
job's secret (``DDPDOCTOR_STORE_SECRET`` or ``--node-secret-file``, the same on every
node; checked before the job starts: node_secret) and whose every message is sealed with
it.  With ``--insecure-node-channel`` the key is a constant anyone knows: every node says
so.  When node 0 cannot be reached, a node decides alone (its own report)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ddpdoctor.analysis.causal.verdict import report_grace_s
from ddpdoctor.analysis.model import JobView
from ddpdoctor.host import host_name
from ddpdoctor.supervisor.flight_recorder import request_dumps, wait_for_dumps
from ddpdoctor.supervisor.node_auth import channel_key
from ddpdoctor.supervisor.node_channel import Hub
from ddpdoctor.supervisor.node_follower import NodeFollower
from ddpdoctor.supervisor.node_leader import NodeLeader
from ddpdoctor.supervisor.node_secret import INSECURE_WARNING, NodeSecret
from ddpdoctor.supervisor.node_store import NodeSetup, open_hub, this_node_id
from ddpdoctor.supervisor.stacks import capture_stacks

STACKS_WAIT_S = 15.0  # py-spy on the other nodes, then their copy


class NodesMixin:
    """Mixed into the Supervisor (uses its config, run_dir, live view, log and say)."""

    leader: NodeLeader | None = None
    follower: NodeFollower | None = None
    _follow_said = False

    def open_nodes(self, setup: NodeSetup | None, secret: NodeSecret | None = None) -> None:
        """Join the other nodes' supervisors (nothing for a one-node job: no port)."""
        if setup is None:
            return
        if secret is None:  # checked by run_job before the job started
            self._alone("no secret for the nodes' channel")
            return
        if secret.insecure:
            self.say(INSECURE_WARNING, "red")  # type: ignore[attr-defined]
            self.log("node_channel", insecure=True)  # type: ignore[attr-defined]
        # a node silent this long is lost; a node never heard of gets as long (the verdict)
        lost_after = report_grace_s(self.config.hang_timeout)  # type: ignore[attr-defined]
        lead = setup.leader
        key = channel_key(secret.value)
        if lead is None:  # no node rank: whoever binds the port first leads
            try:
                hub = open_hub(setup, key, self._store_refused)
            except Exception:  # noqa: BLE001 - the port is taken: another node leads
                hub = None
            if hub is not None:
                self._lead(setup, lambda: hub, lost_after)
                return
        elif lead:
            self._lead(setup, lambda: open_hub(setup, key, self._store_refused), lost_after)
            return
        self.follower = NodeFollower(setup, this_node_id(setup), self._watched, lost_after,
                                     secret.value, self.log)  # type: ignore[attr-defined]
        self.follower.start()
        self.say(f"following node 0 through {setup.address}: it decides and "  # type: ignore
                 "writes the job's one report")

    def _lead(self, setup: NodeSetup, open_hub: Callable[[], Hub],
              lost_after: float) -> None:
        self.leader = NodeLeader(open_hub, self._run_dir_of, self.say,  # type: ignore[arg-type]
                                 self.log, lost_after,  # type: ignore[attr-defined]
                                 expected=max(0, setup.min_nodes - 1))
        self.leader.start()
        self.nodes_address = setup.address
        self.say(f"node 0 of {setup.nnodes}: the other nodes report here through "  # type: ignore
                 f"{setup.address}; the job's one report is written here")

    def _store_refused(self, key: str, why: str, count: int) -> None:
        """A message that is not this job's supervisors': dropped, logged."""
        self.log("store_refused", key=key[:128], why=why, count=count)  # type: ignore

    def check_leader(self) -> None:
        """Node 0 whose store could not be hosted: said once; it decides for itself."""
        if self.leader is not None and self.leader.failed is not None:
            why = self.leader.failed
            self.leader = None
            self._alone(f"cannot listen for the other nodes at {self.nodes_address} ({why})")

    def _run_dir_of(self, attempt: int) -> Path:
        base = getattr(self, "base_dir", None)
        if base is None:
            return self.run_dir  # type: ignore[attr-defined]
        from ddpdoctor.rundir.attempts import make_attempt_dir

        return make_attempt_dir(base, attempt)

    def _watched(self) -> tuple[int, Path]:
        return getattr(self, "attempt", 0), self.run_dir  # type: ignore[attr-defined]

    def _alone(self, why: str) -> None:
        self.say(f"{why}; this node decides alone and writes its own report", "yellow")  # type: ignore
        self.live.problems.append(f"many nodes: {why}; this report covers this node only")  # type: ignore

    @property
    def following(self) -> bool:
        """Does node 0 decide for this node now?"""
        f = self.follower
        if f is None:
            return False
        if not f.linked and not self._follow_said:
            self._follow_said = True
            if f.unproven:  # another program holds node 0's port: said as an error
                self.say(f"error: {f.failed}", "red")  # type: ignore[attr-defined]
            self._alone(f.failed or "lost node 0")
        return f.linked

    def serve_nodes(self) -> None:
        """Each poll: hand this node's progress to the link, answer node 0's stack asks."""
        f = self.follower
        if f is None or not f.linked:
            return
        local = self.live.local_ranks()  # type: ignore[attr-defined]
        f.ranks = sorted(local)
        f.progress = self.progress.event()  # type: ignore[attr-defined]
        while f.asks:
            n, ranks = f.asks.pop(0)
            pids = [p.header.pid for r, p in local.items()
                    if not p.gone and (ranks is None or r in ranks)]
            # node 0's verdict (all ranks asked): the flight recorder dumps too
            asked = request_dumps(self.run_dir) if ranks is None else None  # type: ignore
            if pids:
                if ranks is None:  # at the verdict: the connections too, first
                    self._capture_connections(pids)  # type: ignore[attr-defined]
                capture_stacks(pids, self.run_dir / "stacks")  # type: ignore[attr-defined]
                self.log("stacks", why="node 0 asked", pids=pids)  # type: ignore
            if asked is not None:
                grouped = [r for r, p in local.items() if not p.gone and (p.hi or p.groups)]
                wait_for_dumps(self.run_dir, grouped, asked)  # type: ignore[attr-defined]
            f.answered(n)

    def remote_stacks(self, ranks: list[int] | None) -> None:
        """Node 0: the other nodes' stacks (of ``ranks``, or all), copied here."""
        if self.leader is None:
            return
        local = set(self.live.local_ranks())  # type: ignore[attr-defined]
        if ranks is not None:
            ranks = [r for r in ranks if r not in local]
            if not ranks:
                return
        try:
            late = self.leader.wait_acks(self.leader.request_stacks(ranks), STACKS_WAIT_S)
        except Exception as e:  # noqa: BLE001 - the report goes on without them
            late = [f"({type(e).__name__})"]
        if late:
            self.log("stacks_missing", nodes=late)

    def nodes_progress(self, job: JobView) -> None:
        if self.leader is not None:
            self.leader.apply_progress(job)

    def publish_verdict(self, reason: str, message: str, stop: bool, exit_code: int) -> None:
        if self.leader is not None:
            try:
                self.leader.publish_verdict(reason, message, stop, exit_code)
            except Exception as e:  # noqa: BLE001
                self.live.problems.append(f"could not tell the other nodes: {e}")  # type: ignore

    def wait_nodes_done(self) -> None:
        """Node 0, its job ended: the other nodes' last copies before the report."""
        if self.leader is None:
            return
        late = self.leader.wait_done(max(10.0, self.config.hang_timeout))  # type: ignore
        if late:
            self.leader.mark_lost(late)  # the report names their ranks unreachable

    def end_nodes(self, report: dict[str, Any] | None) -> None:
        """Node 0: the report is written; tell the others where, and list the nodes in it."""
        if self.leader is None:
            return
        if report is not None:
            report["nodes"] = [{"node": "0", "host": host_name(), "lost": False}] + \
                self.leader.summary()
            missing = self.leader.expected - len(self.leader.nodes)
            unheard = [f"{missing} node(s) the job needs (--nnodes) never reached node 0: "
                       "their ranks are not in this report"] if missing > 0 else []
            report["problems"] = list(dict.fromkeys(report.get("problems", []) +
                                                    self.leader.problems + unheard))
        path = str(self.report_path) if self.report_path is not None else None  # type: ignore
        try:
            self.leader.publish_final(path, report.get("outcome") if report else None,
                                      host_name())
        except Exception:  # noqa: BLE001 - nobody to tell
            pass
        self.leader.close()

    def follow_end(self, exit_code: int | None) -> bool:
        """A follower whose job ended (or was stopped): send the last copy and wait for node
        0's report.  True when node 0 wrote it (this node writes none)."""
        f = self.follower
        if f is None or not f.linked:
            return False
        self.serve_nodes()
        final = f.finish(exit_code, self.config.hang_timeout + 30.0)  # type: ignore
        f.close()
        if final is None:
            self._alone(f.failed or "node 0 sent no report in time")
            return False
        self.log("report_on_node_0", report=final.get("report"),  # type: ignore[attr-defined]
                 outcome=final.get("outcome"), host=final.get("host"))
        self.say(f"the job's report is on node 0 (host {final.get('host')}): "  # type: ignore
                 f"{final.get('report')}")
        return True
