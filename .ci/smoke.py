"""Smoke run of ddpdoctor on one torch release: the README example, a handful of catalogued
bugs and their fixed twins, a healthy `--ddp torch` run and one healthy framework job
(Lightning), each checked from its exit status and report.json.

Usage:
  python .ci/smoke.py --torch 2.15.0 [--prepare]   (what .ci/run runs)
      the smoke in a venv of torch 2.15.0 (the standard build from the package index; it
      runs on CPU) with ddpdoctor installed from this checkout; the venv is made once under
      $DDPDOCTOR_CI_CACHE (default ~/.cache/ddpdoctor-ci) and reused while complete;
      --prepare: make it ready, run nothing
  python .ci/smoke.py --torch 2.13.0 --python 3.13 --decisions [--prepare]
      in a venv of that Python (pyenv's, or python3.13 on PATH): the control-flow tests
      only (Python 3.12+: tests/unit/test_control_flow_runtime.py and
      tests/integration/test_decisions.py), which the suite's interpreter skips
  python .ci/smoke.py [--all] [--work DIR]
      the smoke on this interpreter's torch; --all: every catalogued bug and twin instead of
      the handful (by hand: about 30 min); --work: where the run dirs go (default: a
      temporary directory, removed at the end)

Prints one line per case and a closing line "smoke: N passed, M failed"; exits 1 when any
case failed.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
CASE_TIMEOUT_S = 300
# Each launch form (script, torchrun, mp.spawn) and internals that move between torch
# releases: a rank's crash, the DistributedSampler patch, DDP's reducer (unused parameters),
# a collective on one rank only.  Cheap ones: the smoke has a few minutes per torch.
HANDFUL = ("crash_mid_epoch", "no_set_epoch", "unused_parameters", "metric_rank0_only")


@dataclass(frozen=True)
class Case:
    """One `ddpdoctor` command and what its run must show."""

    name: str
    args: tuple[str, ...]  # after `python -m ddpdoctor.cli`
    check: Callable[[int, dict], str]  # (exit status, report) -> "" or what is wrong
    needs: tuple[str, ...] = field(default=())  # modules the job imports


def _describe(findings: list[dict]) -> str:
    return "; ".join(f"{f['kind']}/{f['severity']} ranks {f['ranks']}" for f in findings) or \
        "no findings"


def expect_finding(kind: str, ranks: tuple[int, ...], code: int | None = None
                   ) -> Callable[[int, dict], str]:
    """The first error finding is ``kind`` on ``ranks`` (or, with no error, the first
    warning); ``code``: the exit status too."""
    def check(status: int, report: dict) -> str:
        if code is not None and status != code:
            return f"exit {status}, expected {code}"
        named = [f for f in report["findings"] if f["kind"] == kind and f["severity"] != "info"]
        errors = [f for f in report["findings"] if f["severity"] == "error"]
        first = errors[0] if errors else (named[0] if named else None)
        if first is None or first["kind"] != kind or sorted(first["ranks"]) != sorted(ranks):
            return f"expected {kind} on ranks {list(ranks)}: {_describe(report['findings'])}"
        return ""
    return check


def expect_finishes(kind: str, ranks: tuple[int, ...]) -> Callable[[int, dict], str]:
    """A slow but healthy job: it runs to its end (exit 0) with no error finding; a
    finding of ``kind``, if any, blames ``ranks``."""
    def check(status: int, report: dict) -> str:
        errors = [f for f in report["findings"] if f["severity"] == "error"]
        wrong = [f for f in report["findings"] if f["kind"] == kind and
                 sorted(f["ranks"]) != sorted(ranks)]
        if status != 0 or report.get("outcome") != "completed" or errors or wrong:
            return f"exit {status}, outcome {report.get('outcome')}: " \
                f"{_describe(errors + wrong)}"
        return ""
    return check


def expect_clean(status: int, report: dict) -> str:
    """Exit 0, outcome completed, no error or warning."""
    serious = [f for f in report["findings"] if f["severity"] in ("error", "warning")]
    if status != 0 or report.get("outcome") != "completed" or serious:
        return f"exit {status}, outcome {report.get('outcome')}: {_describe(serious)}"
    return ""


def cases(names: tuple[str, ...], work: Path) -> list[Case]:
    from ddpdoctor.bugs import find_bug

    out = [Case("readme_example", ("run", "--hang-timeout", "10", "--nproc-per-node", "2",
                                   "examples/train_hang.py"),
                expect_finding("collective_mismatch", (0,), 124))]
    for name in names:
        bug = find_bug(name)
        wanted = expect_finishes(bug.finding_kind, bug.culprit_ranks) if bug.finishes else \
            expect_finding(bug.finding_kind, bug.culprit_ranks)
        out.append(Case(name, ("bugs", "run", name), wanted))
        out.append(Case(f"{name} --fixed", ("bugs", "run", name, "--fixed"), expect_clean))
    out.append(Case("healthy --ddp torch", ("run", "--ddp", "torch", "--nproc-per-node", "2",
                                            "examples/train_hang.py", "--fixed"), expect_clean))
    out.append(Case("lightning job", ("run", "--nproc-per-node", "2",
                                      "tests/compat/jobs/lightning_job.py",
                                      str(work / "lightning-out")),
                    expect_clean, needs=("lightning",)))
    return out


def _missing(modules: tuple[str, ...]) -> list[str]:
    import importlib.util

    return [m for m in modules if importlib.util.find_spec(m) is None]


def _free_port() -> int:
    """A free port below the ephemeral range, as the suite's jobs take theirs."""
    import importlib.util

    path = REPO / "tests" / "integration" / "jobs" / "ports.py"
    spec = importlib.util.spec_from_file_location("ddpdoctor_ci_ports", path)
    ports = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(ports)  # type: ignore[union-attr]
    return ports.free_port()


def run_case(case: Case, run_dir: Path) -> str:
    """Run one case; "" when it passed, else what went wrong."""
    missing = _missing(case.needs)
    if missing:
        return f"not installed: {', '.join(missing)}"
    args = list(case.args)
    at = 3 if args[0] == "bugs" else 1
    args[at:at] = ["--run-dir", str(run_dir)]  # bugs run takes run options after the name
    # torchrun's rendezvous port (29500 unless told) differs per case: two smokes (two
    # torch releases) run side by side in .ci/run
    env = {**os.environ, "PET_MASTER_PORT": str(_free_port())}
    try:
        proc = subprocess.run([sys.executable, "-m", "ddpdoctor.cli", *args], cwd=REPO,
                              env=env, capture_output=True, text=True,
                              timeout=CASE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"no end in {CASE_TIMEOUT_S} s"
    try:
        report = json.loads((run_dir / "report.json").read_text())
    except (OSError, ValueError) as e:
        return f"exit {proc.returncode}, no report ({e}): {proc.stderr[-2000:]}"
    problem = case.check(proc.returncode, report)
    return f"{problem}\n{proc.stderr[-2000:]}" if problem else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", metavar="VERSION", help="in a venv of this torch release")
    parser.add_argument("--prepare", action="store_true", help="with --torch: only the venv")
    parser.add_argument("--all", action="store_true", help="every catalogued bug and twin")
    parser.add_argument("--work", type=Path, help="where the run dirs go")
    parser.add_argument("--python", metavar="X.Y", help="with --torch: the venv's Python")
    parser.add_argument("--decisions", action="store_true",
                        help="the control-flow tests (Python 3.12+) instead of the cases")
    args = parser.parse_args(argv)
    if args.torch:
        passed_on = (["--all"] if args.all else []) + (
            ["--work", str(args.work)] if args.work else []) + (
            ["--decisions"] if args.decisions else [])
        return in_venv(args.torch, args.prepare, passed_on, args.python)
    if args.decisions:
        return decision_tests()
    import torch

    from ddpdoctor.bugs import CATALOGUE

    names = tuple(b.name for b in CATALOGUE if not _missing(_framework(b.script))) \
        if args.all else HANDFUL
    work = args.work or Path(tempfile.mkdtemp(prefix="ddpdoctor-smoke-"))
    (work / "lightning-out").mkdir(parents=True, exist_ok=True)  # the framework job's output
    print(f"smoke: torch {torch.__version__}, python {sys.version.split()[0]}", flush=True)
    passed = failed = 0
    began = time.monotonic()
    for i, case in enumerate(cases(names, work)):
        t0 = time.monotonic()
        problem = run_case(case, work / f"{i:02d}")
        took = time.monotonic() - t0
        if problem:
            failed += 1
            print(f"FAIL {case.name} ({took:.0f} s): {problem}", flush=True)
        else:
            passed += 1
            print(f"ok   {case.name} ({took:.0f} s)", flush=True)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    print(f"smoke: {passed} passed, {failed} failed ({time.monotonic() - began:.0f} s, "
          f"torch {torch.__version__})", flush=True)
    return 1 if failed else 0


DECISION_TESTS = ("tests/unit/test_control_flow_runtime.py",
                  "tests/integration/test_decisions.py")


def decision_tests() -> int:
    """The control-flow tests on this interpreter (they need Python 3.12+)."""
    print(f"smoke: decisions on python {sys.version.split()[0]}", flush=True)
    if sys.version_info < (3, 12):
        print("smoke: 0 passed, 1 failed (the control-flow tests need Python 3.12+)")
        return 1
    t0 = time.monotonic()
    code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-n", "2", *DECISION_TESTS], cwd=REPO).returncode
    print(f"smoke: decisions {'passed' if code == 0 else 'failed'} "
          f"({time.monotonic() - t0:.0f} s)", flush=True)
    return code


FRAMEWORKS = ("lightning", "accelerate", "ignite", "transformers")
VENV_PACKAGES = ("numpy", "lightning==2.6.6")  # beside torch: the framework case's
TEST_PACKAGES = ("pytest", "pytest-xdist", "pytest-timeout")  # the decisions smoke's
PLUGINS = ("plugins/ddpdoctor-chrome-trace", "plugins/ddpdoctor-example-detector")


def cache_dir() -> Path:
    return Path(os.environ.get("DDPDOCTOR_CI_CACHE") or
                Path.home() / ".cache" / "ddpdoctor-ci")


def _pip(python: Path, *args: str) -> None:
    # the venv pins its torch exactly: a machine-wide pip constraint (a cap on torch, say)
    # must not refuse it, while the machine's index settings still apply
    env = {**os.environ, "PIP_CONSTRAINT": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", *args], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:  # pip's own words only when it failed
        print(proc.stdout[-3000:] + proc.stderr[-3000:], flush=True)
        raise subprocess.CalledProcessError(proc.returncode, "pip install")


def _size_mb(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()
               and not f.is_symlink()) >> 20


def interpreter(version: str | None) -> str:
    """The Python to make a venv with: ``version`` from pyenv (or ``pythonX.Y`` on PATH),
    else this one."""
    if not version:
        return sys.executable
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found = sorted(root.glob(f"{version}.*/bin/python{version}")) if root.is_dir() else []
    return str(found[-1]) if found else (shutil.which(f"python{version}") or
                                         f"python{version}")


def prepare_venv(version: str, python_version: str | None = None) -> Path:
    """The venv of torch ``version`` (on Python ``python_version``, else this one), made
    (and timed) unless a complete one is cached, with ddpdoctor and its plugins installed
    from this checkout as a user installs them."""
    venv = cache_dir() / (f"venv-{version}" + (f"-py{python_version}" if python_version
                                                else ""))
    python = venv / "bin" / "python"
    extra = TEST_PACKAGES if python_version else ()
    wanted = " ".join((f"torch=={version}", *VENV_PACKAGES, *extra))
    marker = venv / "ddpdoctor-ci-complete"
    if not (marker.is_file() and marker.read_text() == wanted and python.exists()):
        shutil.rmtree(venv, ignore_errors=True)
        t0 = time.monotonic()
        subprocess.run([interpreter(python_version), "-m", "venv", str(venv)], check=True)
        _pip(python, *wanted.split())
        marker.write_text(wanted)
        print(f"smoke: torch {version} venv made in {time.monotonic() - t0:.0f} s, "
              f"{_size_mb(venv)} MB ({venv})", flush=True)
    else:
        print(f"smoke: torch {version} venv reused ({venv})", flush=True)
    installed = venv / "ddpdoctor-ci-checkout"
    checkout = _checkout_id()
    if not (installed.is_file() and installed.read_text() == checkout):
        t0 = time.monotonic()
        with open(cache_dir() / "checkout.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one build of the checkout at a time: two
            # venvs made side by side would both write its egg-info
            _pip(python, "-e", str(REPO),
                 *(arg for p in PLUGINS for arg in ("-e", str(REPO / p))))
        installed.write_text(checkout)
        print(f"smoke: ddpdoctor installed beside torch {version} in "
              f"{time.monotonic() - t0:.0f} s", flush=True)
    return python


def _checkout_id() -> str:
    """This checkout's path and its packages' metadata: an editable install of it stays
    valid while neither changes."""
    import hashlib

    digest = hashlib.sha256()
    for p in ("pyproject.toml", *(f"{p}/pyproject.toml" for p in PLUGINS)):
        digest.update((REPO / p).read_bytes())
    return f"{REPO} {digest.hexdigest()}"


def in_venv(version: str, prepare_only: bool, smoke_args: list[str],
            python_version: str | None = None) -> int:
    """Prepare the venv of ``version``; unless ``prepare_only``, run the smoke in it."""
    try:
        python = prepare_venv(version, python_version)
    except (subprocess.CalledProcessError, OSError) as e:
        print(f"smoke: the venv of torch {version} could not be made: {e}", flush=True)
        print("smoke: 0 passed, 1 failed", flush=True)
        return 1
    if prepare_only:
        return 0
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the venv's own
    return subprocess.run([str(python), str(Path(__file__).resolve()), *smoke_args], env=env,
                          cwd=REPO).returncode


def _framework(script: str) -> tuple[str, ...]:
    """The frameworks a catalogued bug's script imports (its name says it)."""
    return tuple(f for f in FRAMEWORKS if script.startswith(f))


if __name__ == "__main__":
    sys.exit(main())
