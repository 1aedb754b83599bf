"""Turn the user's command into the argv and environment that start the instrumented job."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import ddpdoctor
from ddpdoctor.config import RunConfig
from ddpdoctor.errors import UserError
from ddpdoctor.rundir.attempts import ATTEMPTS_ENV, max_restarts
from ddpdoctor.runtime.supervisor_watch import ON_HANG_ENV, SUPERVISOR_PID_ENV
from ddpdoctor.supervisor.node_auth import SECRET_ENV
from ddpdoctor.trace import fr_files

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"
PYTHON_NAMES = ("python", "python3")


def _is_python(arg: str) -> bool:
    name = os.path.basename(arg)
    return name.startswith(PYTHON_NAMES) or arg == sys.executable


def _first_script(args: tuple[str, ...]) -> str | None:
    """The first argument that names a .py file (the user's script), if any."""
    for arg in args:
        if arg == "-m" or arg == "--module" or arg == "-c":
            return None
        if arg.endswith(".py") and not arg.startswith("-"):
            return arg
    return None


def _check_script(script: str | None) -> None:
    if script is not None and not Path(script).is_file():
        raise UserError(f"script not found: {script}")


def job_argv(config: RunConfig) -> list[str]:
    """The argv to start: torch's launcher for a script with --nproc-per-node, else as typed."""
    cmd = list(config.command)
    if config.nproc_per_node is not None and not (_is_python(cmd[0]) or
                                                   os.path.basename(cmd[0]) == "torchrun"):
        if cmd[0] not in ("-m", "--module"):
            _check_script(cmd[0])
        return [sys.executable, "-m", "torch.distributed.run",
                "--nproc-per-node", str(config.nproc_per_node), *config.launcher_args, *cmd]
    if cmd[0].endswith(".py"):  # a self-spawning script given without a launcher
        _check_script(cmd[0])
        return [sys.executable, *cmd]
    if shutil.which(cmd[0]) is None:
        raise UserError(f"command not found: {cmd[0]}")
    if _is_python(cmd[0]) or os.path.basename(cmd[0]) == "torchrun":
        _check_script(_first_script(tuple(cmd[1:])))
    return cmd


def job_env(run_dir: Path, run_id: str, config: RunConfig,
            argv: list[str] | None = None) -> dict[str, str]:
    """The job's environment: the bootstrap first on PYTHONPATH and ddpdoctor's variables;
    when ``argv`` (the job's) may restart its ranks (torchrun --max-restarts), they are told
    to write under their attempt's dir (a job without restarts keeps the plain layout).
    The nodes' secret stays with the supervisor: no rank, nor anything the job starts, is
    given it (a rank needs none, and a process's environment is read by whatever it runs)."""
    env = {k: v for k, v in os.environ.items() if k != SECRET_ENV}
    paths = [str(BOOTSTRAP_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["DDPDOCTOR_RUN_DIR"] = str(run_dir)
    env["DDPDOCTOR_RUN_ID"] = run_id
    env["DDPDOCTOR_DDP"] = config.ddp.value
    env["DDPDOCTOR_PACKAGE_PARENT"] = str(Path(ddpdoctor.__file__).resolve().parents[1])
    env["DDPDOCTOR_HANG_TIMEOUT"] = str(config.hang_timeout)
    env[ON_HANG_ENV] = config.on_hang.value  # the rank-side watch honours it too
    env[SUPERVISOR_PID_ENV] = str(os.getpid())
    if not any(name in env for name in fr_files.BUFFER_ENVS):  # the user's size wins
        env[fr_files.BUFFER_ENVS[0]] = fr_files.DEFAULT_BUFFER_SIZE
    if argv is not None and max_restarts(argv) > 0:
        env[ATTEMPTS_ENV] = "1"
    return env
