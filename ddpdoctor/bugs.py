"""`ddpdoctor bugs`: list the catalogue (ddpdoctor/catalogue.py), run a bug or its fixed twin.

``ddpdoctor bugs list`` shows the catalogue; ``ddpdoctor bugs run NAME [--fixed]`` runs a
bug's script (or its fixed twin) from ``sample_bugs/`` under ``ddpdoctor run``, which prints
its own summary and writes the report.  Every entry says which finding ddpdoctor should
report and which ranks it should blame: ``tests/integration/test_sample_bugs.py`` holds
ddpdoctor to that.
"""

from __future__ import annotations

import difflib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ddpdoctor.catalogue import CATALOGUE, FINDING_KINDS, Bug, Launch  # noqa: F401 (API)
from ddpdoctor.errors import UserError
from ddpdoctor.frameworks import known
from ddpdoctor.proc.signals import interrupts_raised, signal_of
from ddpdoctor.report.console import print_table
from ddpdoctor.terminal_text import SafeConsole

ENV_SAMPLE_BUGS = "DDPDOCTOR_SAMPLE_BUGS"


def find_bug(name: str) -> Bug:
    """The catalogue entry called ``name``; a UserError naming close matches otherwise."""
    for bug in CATALOGUE:
        if bug.name == name:
            return bug
    names = [b.name for b in CATALOGUE]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    close += [n for n in names if name and name in n and n not in close][: 3 - len(close)]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UserError(f"no bug named {name!r} in the catalogue{hint} "
                    "(`ddpdoctor bugs list` shows them all)")


def sample_bugs_dir() -> Path:
    """Where the bug scripts are: $DDPDOCTOR_SAMPLE_BUGS, else the source checkout's."""
    import ddpdoctor

    env = os.environ.get(ENV_SAMPLE_BUGS)
    candidate = Path(env) if env else Path(ddpdoctor.__file__).resolve().parents[1] / \
        "sample_bugs"
    if not (candidate / CATALOGUE[0].script).is_file():
        raise UserError(f"the bug scripts are not in {candidate}: they ship with ddpdoctor's "
                        f"source checkout (sample_bugs/); run from a clone, or set "
                        f"{ENV_SAMPLE_BUGS} to the directory that holds them")
    return candidate


def _torchrun() -> list[str]:
    """torchrun from this interpreter's environment (else the one on PATH, else -m)."""
    beside = Path(sys.executable).with_name("torchrun")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("torchrun")
    return [found] if found else [sys.executable, "-m", "torch.distributed.run"]


# the frameworks of the catalogued framework bugs (module -> package): not ddpdoctor's
# dependencies; the test extras install them (pip install -e ".[test]")
FRAMEWORKS = known.install_names()


def _check_framework(bug: Bug, script: Path) -> None:
    """A bug whose script imports a framework that is not installed: a one-line error
    that says what to install, instead of a run whose ranks die of an ImportError."""
    import ast
    import importlib.util

    try:
        tree = ast.parse(script.read_text())
    except (OSError, SyntaxError, ValueError):
        return  # the run says what is wrong with the script
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        else:
            continue
        for top in {n.split(".")[0] for n in names} & set(FRAMEWORKS):
            if importlib.util.find_spec(top) is None:
                raise UserError(f"{bug.name} runs on {top}, which is not installed: "
                                f"pip install {FRAMEWORKS[top]} (or the test extras: "
                                "pip install -e \".[test]\")")


def job_command(bug: Bug, fixed: bool) -> list[str]:
    """The user's command without ddpdoctor, as ``ddpdoctor run`` gets it."""
    script = bug.fixed_script if fixed else bug.script
    if bug.launch == Launch.SCRIPT:
        return ["--nproc-per-node", str(bug.nproc), script]
    if bug.launch == Launch.TORCHRUN:
        return ["--", *_torchrun(), "--nproc-per-node", str(bug.nproc), script]
    return ["--", sys.executable, script]


def run_command(bug: Bug, fixed: bool, extra_args: list[str], run_dir: Path | None) -> list[str]:
    """The full ``ddpdoctor run`` command line for a bug (``extra_args`` are run options)."""
    cmd = [sys.executable, "-m", "ddpdoctor.cli", "run", "--hang-timeout",
           str(bug.hang_timeout)]
    if run_dir is not None:
        cmd += ["--run-dir", str(run_dir)]
    return cmd + list(extra_args) + job_command(bug, fixed)


def _default_run_dir(bug: Bug, fixed: bool) -> Path:
    """``./ddpdoctor-runs/<time>-<name>[-fixed]`` in the user's directory, not sample_bugs/."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path.cwd() / "ddpdoctor-runs" / f"{stamp}-{bug.name}{'-fixed' if fixed else ''}"


def run_bug(name: str, fixed: bool, extra_args: list[str], repro: bool = False) -> int:
    """Run a bug (or its fixed twin) under ``ddpdoctor run``; returns that run's exit status.

    With ``repro``, the run dir's repro script is written and printed after the run.  The
    flags ``--fixed`` and ``--repro`` may also come among the run options after the name."""
    fixed = fixed or "--fixed" in extra_args
    repro = repro or "--repro" in extra_args
    extra_args = [a for a in extra_args if a not in ("--fixed", "--repro")]
    bug = find_bug(name)
    where = sample_bugs_dir()
    _check_framework(bug, where / (bug.fixed_script if fixed else bug.script))
    own_dir = any(a == "--run-dir" or a.startswith("--run-dir=") for a in extra_args)
    run_dir = None if own_dir else _default_run_dir(bug, fixed)
    cmd = run_command(bug, fixed, extra_args, run_dir)
    console = SafeConsole(stderr=True, highlight=False)
    variant = "fixed twin" if fixed else "bug"
    console.print(f"[bold]{bug.name}[/] ({variant}, {bug.nproc} ranks): "
                  f"{escape(bug.fix if fixed else bug.symptom)}")
    expect = ("a clean run: exit 0, no error or warning" if fixed else
              f"{bug.finding_kind} blaming rank{'s' if len(bug.culprit_ranks) > 1 else ''} "
              f"{', '.join(map(str, bug.culprit_ranks))}")
    console.print(f"expected: {expect}", style="dim")
    shown = ["python" if a == sys.executable else
             "torchrun" if a.endswith(f"{os.sep}torchrun") else a for a in cmd[4:]]
    console.print(escape("$ cd sample_bugs && ddpdoctor run " + " ".join(shown)), style="dim")
    code = _wait_for_run(subprocess.Popen(cmd, cwd=where))
    if repro:
        _print_repro(console, _given_run_dir(extra_args, where) or run_dir)
    return code


def _wait_for_run(proc: subprocess.Popen) -> int:
    """The run's exit status, waited for through Ctrl-C, SIGTERM and SIGHUP: the run ends
    its job and writes the report before it exits.  Ctrl-C reached it from the terminal as
    it reached this process; another signal, perhaps sent to this process alone, is passed
    on."""
    with interrupts_raised():
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt as e:
                if signal_of(e) != signal.SIGINT:
                    proc.send_signal(signal_of(e))


def _given_run_dir(extra_args: list[str], where: Path) -> Path | None:
    """The ``--run-dir`` among the run options (relative to the bug scripts' directory)."""
    for i, a in enumerate(extra_args):
        if a.startswith("--run-dir="):
            return where / a.partition("=")[2]
        if a == "--run-dir" and i + 1 < len(extra_args):
            return where / extra_args[i + 1]
    return None


def _print_repro(console: Console, run_dir: Path | None) -> None:
    """Write the run dir's repro script and print it (a run dir too thin to replay: why)."""
    from ddpdoctor.repro.command import write_repro

    if run_dir is None:
        return
    try:
        target = write_repro(run_dir)
    except UserError as e:
        console.print(f"ddpdoctor: no repro: {escape(str(e))}", style="yellow")
        return
    console.print(f"repro: {target}", style="bold")
    print(target.read_text(), end="", flush=True)


def list_bugs(console: Console, verbose: bool = False) -> int:
    """Print the catalogue: one line a bug, grouped by the finding ddpdoctor reports (with
    ``verbose``, each bug in full); returns 0."""
    if verbose:
        for bug in CATALOGUE:
            _print_bug(bug, console)
            console.print()
    else:
        _print_compact(console)
    console.print("One in full: [bold]ddpdoctor bugs show NAME[/]; run one: [bold]ddpdoctor "
                  "bugs run NAME[/] (add [bold]--fixed[/] for its fix). Sources: "
                  "sample_bugs/README.md", highlight=False)
    return 0


def _print_compact(console: Console) -> None:
    """Each finding kind, then its bugs: name, ranks blamed, symptom cut to the line."""
    name_width = 2 + max(len(b.name) for b in CATALOGUE)
    blame_width = max(len(_blames(b)) for b in CATALOGUE)
    table = Table(box=None, show_header=False, pad_edge=False, padding=(0, 1), expand=True)
    table.add_column("bug", no_wrap=True, style="cyan", min_width=name_width)
    table.add_column("blames", no_wrap=True, style="dim", min_width=blame_width)
    table.add_column("symptom", no_wrap=True, overflow="ellipsis", ratio=1)
    for kind in FINDING_KINDS:
        bugs = [b for b in CATALOGUE if b.finding_kind == kind]
        if bugs:
            table.add_row(f"[bold]{kind}[/] ({len(bugs)})", "", "", style="not dim")
        for bug in bugs:
            table.add_row(f"  {bug.name}", _blames(bug), escape(bug.symptom))
    print_table(console, table)


def _blames(bug: Bug) -> str:
    if bug.finishes:
        return "healthy"
    plural = "s" if len(bug.culprit_ranks) > 1 else ""
    return f"rank{plural} {','.join(map(str, bug.culprit_ranks))} of {bug.nproc}"


def show_bug(name: str, console: Console) -> int:
    """`ddpdoctor bugs show NAME`: one bug in full; returns 0 (a UserError for no such bug)."""
    _print_bug(find_bug(name), console)
    return 0


def _print_bug(bug: Bug, console: Console) -> None:
    """One bug: symptom, launch, what ddpdoctor reports, the fix, the source."""
    blame = ", ".join(map(str, bug.culprit_ranks))
    plural = "s" if len(bug.culprit_ranks) > 1 else ""
    reports = (f"at most {bug.finding_kind} (a slow but healthy job: no error)" if bug.finishes
               else f"{bug.finding_kind}, blaming rank{plural} {blame}")
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    table.add_row("symptom", escape(bug.symptom))
    table.add_row("ranks", f"{bug.nproc}, started by {bug.launch.value} "
                  f"(sample_bugs/{escape(bug.script)})")
    table.add_row("reports", reports)
    table.add_row("fix", escape(bug.fix) + f" (sample_bugs/{escape(bug.fixed_script)})")
    table.add_row("source", escape(bug.source))
    console.print(f"[bold cyan]{bug.name}[/]", highlight=False)
    print_table(console, table)
