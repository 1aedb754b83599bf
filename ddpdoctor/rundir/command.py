"""`ddpdoctor runs`: list the runs of a runs folder, and prune them.

The lines are printed whole, never wrapped: a path or a command is never split.
"""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.errors import UserError
from ddpdoctor.rundir.layout import RUNS_DIR
from ddpdoctor.rundir.retention import Pruning, parse_age, prune
from ddpdoctor.rundir.runs import RunEntry, list_runs
from ddpdoctor.terminal_text import safe

EXIT_USAGE = 2
EXIT_NOT_REMOVED = 1  # prune: a run could not be removed
HEADER = ("started", "outcome", "size", "run", "command")


def _say(text: str) -> None:
    """One line on stdout, made safe for a terminal (a run dir's name is anyone's who could
    write the runs folder)."""
    print(safe(text))


def size_text(n: int) -> str:
    """``812 KiB``, ``24.1 MiB``, ``3.9 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit in ("B", "KiB") else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _rows(runs: list[RunEntry], first: str | None = None) -> list[str]:
    """Aligned lines (the command last: it alone has no width to keep)."""
    cells = [(r.started_text, r.outcome, size_text(r.size), str(r.path), r.command)
             for r in runs]
    head = [HEADER] if first is None else []
    widths = [max(len(row[i]) for row in head + cells) for i in range(4)]
    lines = []
    for row in head + cells:
        text = "  ".join(c.ljust(w) if i != 2 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(row, widths)))
        lines.append(((first + "  ") if first is not None else "") + f"{text}  {row[4]}")
    return lines


def _folder(given: Path | None) -> Path | None:
    """The runs folder; None when the default one does not exist (no runs yet); a
    UserError for a given one that is no directory."""
    folder = given if given is not None else RUNS_DIR
    if folder.is_dir():
        return folder
    if given is None:
        return None
    raise UserError(f"{folder} is not a directory of runs (give the folder that holds the "
                    "run dirs, e.g. ddpdoctor-runs)", EXIT_USAGE)


def list_command(given: Path | None) -> int:
    """Print the runs, newest first, and their total size."""
    folder = _folder(given)
    runs = list_runs(folder) if folder is not None else []
    if not runs:
        _say(f"no runs in {folder or RUNS_DIR}")
        return 0
    for line in _rows(runs):
        _say(line)
    live = sum(1 for r in runs if r.live)
    _say(f"{len(runs)} run{'s' if len(runs) != 1 else ''}, "
          f"{size_text(sum(r.size for r in runs))} in {folder}"
          + (f"; {live} live" if live else ""))
    return 0


def prune_command(given: Path | None, keep: int | None, older_than: str | None,
                  dry_run: bool) -> int:
    """Remove the runs past the newest ``keep`` or older than ``older_than`` (or say which
    would go, ``dry_run``); exit 1 when one could not be removed."""
    if (keep is None) == (older_than is None):
        raise UserError("say which runs to keep: --keep N or --older-than AGE (see "
                        "`ddpdoctor runs prune --help`)", EXIT_USAGE)
    if keep is not None and keep < 0:
        raise UserError(f"--keep must be 0 or more, not {keep}", EXIT_USAGE)
    age = parse_age(older_than) if older_than is not None else None
    folder = _folder(given)
    if folder is None:
        _say(f"no runs in {RUNS_DIR}")
        return 0
    done = prune(folder, keep, age, dry_run)
    for line in _rows(done.remove, "would remove" if dry_run else "removed"):
        _say(line)
    for run, why in done.failed:
        _say(f"not removed  {run.path}: {why}")
    _say(summary(done, folder, dry_run))
    return EXIT_NOT_REMOVED if done.failed else 0


def summary(done: Pruning, folder: Path, dry_run: bool = False) -> str:
    """``removed 3 runs (24.1 MiB) of ddpdoctor-runs; 20 kept (1 live)``."""
    n = len(done.remove)
    live = f", {len(done.live)} live one{'s' if len(done.live) != 1 else ''} among them" \
        if done.live else ""
    return (f"{'would remove' if dry_run else 'removed'} {n} run{'s' if n != 1 else ''} "
            f"({size_text(done.removed_bytes)}) of {folder}; {done.kept} kept{live}")


def prune_before_run(keep: int | None) -> str | None:
    """`run`'s retention: keep the newest ``keep`` runs of ./ddpdoctor-runs (the new run,
    live, is one of them); returns the notice to print, or None when nothing went.  Never
    raises: a run starts whatever the old runs' state."""
    if keep is None or not RUNS_DIR.is_dir():
        return None
    try:
        done = prune(RUNS_DIR, keep)
    except OSError as e:
        return f"could not prune {RUNS_DIR}: {e.strerror or e}"
    if not done.remove:
        return None
    return f"{summary(done, RUNS_DIR)} (--keep {keep}; `ddpdoctor runs` lists them)"
