"""What a catalogue entry is: one known DDP bug, how its script starts, what ddpdoctor must
say of it (ddpdoctor/catalogue.py holds the entries)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ddpdoctor.kinds import CATALOGUE_KINDS as FINDING_KINDS  # noqa: F401 (the API)


class Launch(str, enum.Enum):
    """How a bug's script starts its ranks, i.e. which form of ``ddpdoctor run`` runs it.

    SCRIPT:   ``ddpdoctor run --nproc-per-node N script.py`` (the script reads RANK from env)
    TORCHRUN: ``ddpdoctor run -- torchrun --nproc-per-node N script.py``
    SPAWN:    ``ddpdoctor run -- python script.py`` (the script calls mp.spawn itself)
    """

    SCRIPT = "script"
    TORCHRUN = "torchrun"
    SPAWN = "spawn"


@dataclass(frozen=True)
class Bug:
    """One known bug and what ddpdoctor must say about it.

    Args:
        name: the catalogue name; the script is ``sample_bugs/<name>.py``.
        script: the buggy script's file name, inside ``sample_bugs/``.
        fixed_script: its fixed twin, which must run clean (exit 0, no error or warning).
        nproc: how many ranks the job has.
        launch: how the ranks start (see ``Launch``).
        symptom: what the user sees, one line.
        finding_kind: the finding ddpdoctor must report (a kind of the report schema).
        culprit_ranks: the ranks that finding must blame.
        source: where the bug comes from: issues, articles.
        fix: what the fixed twin changes, one line.
        hang_timeout: ``--hang-timeout`` for the run, in seconds.
        finishes: the job is slow but healthy: it must run to its end (exit 0) with no error
            finding; ``finding_kind`` is then the most ddpdoctor may say (a warning at most).
        replay_gap: why ``ddpdoctor repro`` of its run cannot give the same first finding;
            empty when it can.
    """

    name: str
    script: str
    fixed_script: str
    nproc: int
    launch: Launch
    symptom: str
    finding_kind: str
    culprit_ranks: tuple[int, ...]
    source: str
    fix: str
    hang_timeout: float = 6.0
    finishes: bool = False
    replay_gap: str = ""

    def __post_init__(self) -> None:
        if self.finding_kind not in FINDING_KINDS:
            raise ValueError(f"bug {self.name}: unknown finding kind {self.finding_kind!r}")
        if not 2 <= self.nproc <= 4:
            raise ValueError(f"bug {self.name}: nproc must be 2 to 4, not {self.nproc}")
        if any(not 0 <= r < self.nproc for r in self.culprit_ranks):
            raise ValueError(f"bug {self.name}: culprit ranks {self.culprit_ranks} outside "
                             f"0..{self.nproc - 1}")


def entry(name: str, nproc: int, launch: Launch, symptom: str, kind: str,
          culprits: tuple[int, ...], source: str, fix: str, hang_timeout: float = 6.0,
          finishes: bool = False) -> Bug:
    """The entry of the bug whose scripts are ``<name>.py`` and ``<name>_fixed.py``."""
    return Bug(name, f"{name}.py", f"{name}_fixed.py", nproc, launch, symptom, kind, culprits,
               source, fix, hang_timeout, finishes)
