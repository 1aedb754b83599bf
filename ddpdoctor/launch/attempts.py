"""Restartable jobs (torchrun --max-restarts N): their environment and their supervisor."""

from __future__ import annotations

from typing import Any

from ddpdoctor.rundir.attempts import ATTEMPTS_ENV, max_restarts
from ddpdoctor.supervisor.loop import Supervisor


def restarts_env(argv: list[str], env: dict[str, str]) -> dict[str, str]:
    """``env``, telling the ranks to write under their attempt's dir when ``argv`` may
    restart them (a job without restarts keeps the plain run-dir layout)."""
    if max_restarts(argv) > 0:
        env = {**env, ATTEMPTS_ENV: "1"}
    return env


def make_supervisor(argv: list[str], *args: Any, **kwargs: Any) -> Supervisor:
    """The job's supervisor: one that follows attempts when ``argv`` may restart."""
    restarts = max_restarts(argv)
    if restarts <= 0:
        return Supervisor(*args, **kwargs)
    from ddpdoctor.supervisor.attempts import AttemptSupervisor

    return AttemptSupervisor(*args, max_restarts=restarts, **kwargs)

