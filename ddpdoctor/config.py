"""RunConfig: everything `ddpdoctor run` was asked to do, checked once."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from ddpdoctor.errors import UserError


class OnHang(str, enum.Enum):
    """What to do with the job once a hang is reported."""

    STOP = "stop"  # write the report, then stop every rank (exit 124)
    WAIT = "wait"  # write the report and leave the job running


class DdpMode(str, enum.Enum):
    """Which DistributedDataParallel the user's script gets."""

    RING = "ring"  # ddpdoctor's instrumented ring-allreduce DDP
    TORCH = "torch"  # torch's own DDP, its buckets recorded through a comm hook


class Shown(str, enum.Enum):
    """What a diagnosing command prints on stdout once it has a report."""

    SUMMARY = "summary"  # the verdict, the rank table, the findings, the report's path
    QUIET = "quiet"  # the verdict line and the report's path
    JSON = "json"  # the report as JSON, nothing else


class FailOn(str, enum.Enum):
    """When `ddpdoctor run` fails a job that exited 0 (for CI): a finding named of this
    severity or worse makes the exit status 1; never keeps the job's own status."""

    ERROR = "error"
    WARNING = "warning"
    NEVER = "never"

    def fails(self, severity: object) -> bool:
        """Does a finding of ``severity`` fail the run?"""
        if self is FailOn.NEVER:
            return False
        worse = ("error",) if self is FailOn.ERROR else ("error", "warning")
        return str(getattr(severity, "value", severity)) in worse


HANG_TIMEOUT = 60.0  # seconds: --hang-timeout's default (docs/running.md, `run --help`)
WAIT_BOUND_FACTOR = 10  # --wait-bound's default: this many hang timeouts (600 s)
KEEP_RUNS = 20  # --keep's default: the newest runs of ./ddpdoctor-runs kept (docs/running.md)


def wait_bound(hang_timeout: float, given: float | None = None) -> float:
    """How long ranks may wait on a rank that keeps working outside any collective (it
    computes, polls, sleeps or retries) before the job hangs: ``given``, else
    ``WAIT_BOUND_FACTOR`` hang timeouts."""
    return given if given is not None else WAIT_BOUND_FACTOR * hang_timeout


def parse_store(text: str) -> tuple[str, int]:
    """``HOST:PORT`` of --doctor-store -> (host, port); a UserError otherwise."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--doctor-store wants HOST:PORT, not {text!r}")
    return host, int(port)


@dataclass(frozen=True)
class RunConfig:
    """Args:
    command: the job's argv as the user would have typed it (after ddpdoctor's options).
    nproc_per_node: ranks on this node when ``command`` is a script (torch.distributed.run).
    hang_timeout: seconds a rank may wait inside one collective before the job is hung.
    wait_bound: seconds ranks may wait on a rank that keeps working outside any collective
    (None: ``WAIT_BOUND_FACTOR`` hang timeouts).
    on_hang: stop or leave the job once a hang is reported.
    report: where report.json goes (default RUN_DIR/report.json).
    run_dir: where traces, stacks and reports go (default ./ddpdoctor-runs/<time>-<id>).
    ddp: which DDP the user's script gets.
    ui: show the live terminal UI.
    launcher_args: torchrun options passed through (--nnodes, --node-rank, --rdzv-*, ...).
    doctor_store: HOST:PORT where the supervisors of a many-node job meet (node 0 hosts it).
    node_secret_file: a file (mode 600) holding the secret the nodes share.
    insecure_node_channel: many nodes without a secret, accepted by the user.
    fail_on: exit 1 when the job exited 0 but a finding of this severity or worse was named.
    keep: the newest runs of ./ddpdoctor-runs kept when this run is made there (None: all).
    shown: what stdout gets at the end (the summary, the verdict line, or the report's JSON).
    """

    command: tuple[str, ...]
    nproc_per_node: int | None = None
    hang_timeout: float = HANG_TIMEOUT
    on_hang: OnHang = OnHang.STOP
    report: Path | None = None
    run_dir: Path | None = None
    ddp: DdpMode = DdpMode.RING
    ui: bool = False
    launcher_args: tuple[str, ...] = field(default_factory=tuple)
    doctor_store: str | None = None
    node_secret_file: Path | None = None
    insecure_node_channel: bool = False
    wait_bound: float | None = None
    fail_on: FailOn = FailOn.NEVER
    keep: int | None = KEEP_RUNS
    shown: Shown = Shown.SUMMARY

    @property
    def bound(self) -> float:
        """The wait bound in force (``wait_bound`` or its default)."""
        return wait_bound(self.hang_timeout, self.wait_bound)

    def __post_init__(self) -> None:
        if not self.command:
            raise UserError("no command to run: give a script or `-- COMMAND ...`")
        if self.nproc_per_node is not None and self.nproc_per_node < 1:
            raise UserError(f"--nproc-per-node must be at least 1, not {self.nproc_per_node}")
        if self.doctor_store is not None:
            parse_store(self.doctor_store)
        if not self.hang_timeout > 0:
            raise UserError(f"--hang-timeout must be a positive number of seconds, "
                            f"not {self.hang_timeout}")
        if self.keep is not None and self.keep < 1:
            raise UserError(f"--keep must be at least 1 (the new run), or all, not {self.keep}")
        if self.wait_bound is not None and not self.wait_bound >= self.hang_timeout:
            raise UserError(f"--wait-bound ({self.wait_bound:g} s) must be at least the hang "
                            f"timeout ({self.hang_timeout:g} s)")
