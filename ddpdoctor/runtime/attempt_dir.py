"""A restarted rank writes under its attempt's dir: RUN_DIR/attempt-K, K from torchrun."""

from __future__ import annotations

import os
from pathlib import Path

from ddpdoctor.rundir.attempts import ATTEMPTS_ENV, RESTART_COUNT_ENV, make_attempt_dir
from ddpdoctor.runtime.recorder import ENV_RUN_DIR


def enter() -> None:
    """Point DDPDOCTOR_RUN_DIR at this worker's attempt dir, once: its children inherit it.
    Nothing changes for a job that cannot restart or a process torchrun did not start."""
    count = os.environ.get(RESTART_COUNT_ENV)
    run_dir = os.environ.get(ENV_RUN_DIR)
    if not os.environ.get(ATTEMPTS_ENV) or count is None or not run_dir:
        return
    try:
        attempt = int(count)
    except ValueError:
        return  # not torchrun's counter: the base run dir is kept
    path = make_attempt_dir(Path(run_dir), attempt)
    os.environ[ENV_RUN_DIR] = str(path)
    del os.environ[ATTEMPTS_ENV]
