"""Lint on real code: every finding on the two corpora against the judged ones, and the
precision and recall tables (docs/lint.md shows them).

    python -m tests.lint_corpus.score            # the tables
    python -m tests.lint_corpus.score --findings # every finding, judged or new

The second corpus, ``fresh/`` (fresh/SOURCES.md), holds real training scripts of 36 other
repositories, judged at first contact (fresh/FIRST_CONTACT.md) before lint was changed for them,
and each judged file is linted alone with its project beside it (``fresh/OWNER__NAME/``, the
modules it imports), as a user lints a script in their checkout. fresh/expected.json holds every
finding lint gives on it, judged once.

The corpus: ``healthy/`` holds public training scripts and helper modules as their
repositories have them (SOURCES.md: repository, path, commit, licence); they are third-party
code and are not committed here: the directory is found under $DDPDOCTOR_LINT_CORPUS, beside
this file, or in the shared area (``../shared/lint_corpus``). ``buggy/`` holds reconstructions of
the reproductions in public bug reports, each with its culprit line. expected.json holds every
finding lint gives on both, judged once by reading the code (``true``: a real problem)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ddpdoctor.lint.engine import lint_files
from ddpdoctor.lint.findings import LintFinding

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXPECTED = HERE / "expected.json"
BUGGY = HERE / "buggy"
FRESH = HERE / "fresh"


def healthy_dir() -> Path | None:
    """Where the healthy corpus is on this machine, if anywhere."""
    candidates = [Path(os.environ["DDPDOCTOR_LINT_CORPUS"]) / "healthy"] \
        if os.environ.get("DDPDOCTOR_LINT_CORPUS") else []
    candidates += [HERE / "healthy", ROOT.parent / "shared" / "lint_corpus" / "healthy",
                   Path.home() / ".cache" / "ddpdoctor" / "lint_corpus" / "healthy"]
    return next((c for c in candidates if c.is_dir() and any(c.glob("*.py"))), None)


@dataclass(frozen=True)
class Judged:
    """One finding lint gives on the corpus, judged by reading the code."""

    set: str  # healthy or buggy
    file: str
    line: int
    kind: str
    severity: str
    true: bool  # a real problem (for a bug file: its culprit)
    note: str

    @property
    def key(self) -> tuple[str, str, int, str, str]:
        return (self.set, self.file, self.line, self.kind, self.severity)


@dataclass(frozen=True)
class Culprit:
    """A bug file's culprit: the line lint must flag, and where the bug was reported."""

    file: str
    line: int
    url: str


def load_expected() -> tuple[list[Judged], list[Culprit]]:
    data = json.loads(EXPECTED.read_text())
    judged = [Judged(**j) for j in data["findings"]]
    culprits = [Culprit(**c) for c in data["culprits"]]
    return judged, culprits


def lint_corpus(where: Path, name: str) -> list[tuple[tuple[str, str, int, str, str],
                                                       LintFinding]]:
    """Each file linted alone, as a user lints a script: (key, finding) pairs."""
    out = []
    for path in sorted(where.glob("*.py")):
        for f in lint_files([path]):
            out.append(((name, path.name, f.line, f.kind, f.severity.value), f))
    return out


def files_in(where: Path | None) -> list[str]:
    return sorted(p.name for p in where.glob("*.py")) if where is not None else []


def table(judged: list[Judged], culprits: list[Culprit], found: set, healthy: list[str],
          buggy: list[str]) -> str:
    """The precision and recall table, from the findings lint gave just now."""
    by_key = {j.key: j for j in judged}
    rows = ["| corpus | files | errors | warnings | true | false | new (not judged) |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, files in (("healthy", healthy), ("buggy", buggy)):
        mine = [k for k in found if k[0] == name]
        errors = sum(k[4] == "error" for k in mine)
        true = sum(by_key[k].true for k in mine if k in by_key)
        false = sum(not by_key[k].true for k in mine if k in by_key)
        new = sum(k not in by_key for k in mine)
        rows.append(f"| {name} | {len(files)} | {errors} | {len(mine) - errors} | {true} | "
                    f"{false} | {new} |")
    all_found = [k for k in found if k in by_key]
    true = sum(by_key[k].true for k in all_found)
    precision = true / len(found) if found else 1.0
    hit = sum(any(k[0] == "buggy" and k[1] == c.file and k[2] == c.line for k in found)
              for c in culprits if c.file in buggy)
    total = sum(c.file in buggy for c in culprits)
    healthy_warnings = sum(k[0] == "healthy" and k[4] != "error" for k in found)
    rows += ["", f"precision {precision:.2f} ({true} true of {len(found)} findings); recall "
             f"{hit}/{total} bug culprits flagged at their line; healthy files: "
             f"{sum(k[0] == 'healthy' and k[4] == 'error' for k in found)} errors, "
             f"{healthy_warnings} warnings on {len(healthy)} files."]
    return "\n".join(rows)


def measure() -> tuple[set, dict, list[str], list[str]]:
    """Lint the corpus: the found keys, their findings, the healthy and buggy file names."""
    healthy = healthy_dir()
    pairs = lint_corpus(BUGGY, "buggy")
    if healthy is not None:
        pairs += lint_corpus(healthy, "healthy")
    return {k for k, _ in pairs}, dict(pairs), files_in(healthy), files_in(BUGGY)


@dataclass(frozen=True)
class FreshFile:
    """A judged file of the fresh corpus: its set, its path in fresh/, its project's directory."""

    set: str
    path: str
    project: Path
    culprit: int | None
    related: tuple[int, ...]


def fresh_files() -> list[FreshFile]:
    out = []
    for e in json.loads((FRESH / "manifest.json").read_text()):
        if e["role"] != "judged":
            continue
        project = FRESH / e["set"] / e["repo"].replace("/", "__")
        out.append(FreshFile(e["set"], e["path"], project, e.get("culprit_line"),
                             tuple(e.get("related_lines", []))))
    return out


def lint_fresh() -> list[tuple[tuple[str, str, int, str, str], LintFinding]]:
    """Each judged file of the fresh corpus linted alone, its project beside it."""
    out = []
    for f in fresh_files():
        for finding in lint_files([FRESH / f.path], project=f.project):
            out.append(((f.set, f.path, finding.line, finding.kind, finding.severity.value),
                        finding))
    return out


@dataclass(frozen=True)
class FreshScore:
    """The fresh corpus's row per set, and its culprits."""

    rows: dict[str, tuple[int, int, int, int, int, int, int]]  # files, err, warn, true, false
    #                                                             errors, false warnings, new
    culprits_hit: int
    culprits: int
    new: list[tuple[str, str, int, str, str]]


def score_fresh(found: set[tuple[str, str, int, str, str]]) -> FreshScore:
    data = json.loads((FRESH / "expected.json").read_text())
    by_key = {(j["set"], j["file"], j["line"], j["kind"], j["severity"]): j
              for j in data["findings"]}
    files = fresh_files()
    rows = {}
    for name in ("healthy", "buggy"):
        mine = [k for k in found if k[0] == name]
        errors = sum(k[4] == "error" for k in mine)
        false_errors = sum(k[4] == "error" and not by_key[k]["true"] for k in mine if k in by_key)
        false_warnings = sum(k[4] != "error" and not by_key[k]["true"]
                             for k in mine if k in by_key)
        rows[name] = (sum(f.set == name for f in files), errors, len(mine) - errors,
                      sum(by_key[k]["true"] for k in mine if k in by_key), false_errors,
                      false_warnings, sum(k not in by_key for k in mine))
    hit = 0
    buggy = [f for f in files if f.set == "buggy"]
    for f in buggy:
        lines = {f.culprit, *f.related}
        hit += any(k[1] == f.path and k[2] in lines for k in found)
    return FreshScore(rows, hit, len(buggy), sorted(k for k in found if k not in by_key))


def fresh_table(score: FreshScore) -> str:
    rows = ["| corpus | files | errors | warnings | true | false errors | false warnings | "
            "new (not judged) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, (n, err, warn, true, ferr, fwarn, new) in score.rows.items():
        rows.append(f"| fresh {name} | {n} | {err} | {warn} | {true} | {ferr} | {fwarn} | {new} |")
    files = sum(r[0] for r in score.rows.values())
    ferr = sum(r[4] for r in score.rows.values())
    fwarn = sum(r[5] for r in score.rows.values())
    rows += ["", f"fresh corpus: {ferr} false errors and {fwarn} false warnings on {files} files; "
             f"{score.culprits_hit}/{score.culprits} bug culprits flagged at their line (or a "
             "related line of the same bug)."]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.lint_corpus.score")
    parser.add_argument("--findings", action="store_true", help="list every finding")
    args = parser.parse_args(argv)
    judged, culprits = load_expected()
    found, findings, healthy, buggy = measure()
    if not healthy:
        print("the healthy corpus is not on this machine (see SOURCES.md); buggy files only",
              file=sys.stderr)
    if args.findings:
        by_key = {j.key: j for j in judged}
        for key in sorted(found):
            verdict = by_key[key].true if key in by_key else "NEW"
            print(f"{key[0]}/{key[1]}:{key[2]}: {key[4]} {key[3]} [{verdict}] "
                  f"{findings[key].message}")
    print(table(judged, culprits, found, healthy, buggy))
    fresh = lint_fresh()
    fresh_found = {k for k, _ in fresh}
    if args.findings:
        for key, f in sorted(fresh, key=lambda p: p[0]):
            print(f"fresh {key[1]}:{key[2]}: {key[4]} {key[3]} {f.message}")
    print()
    print(fresh_table(score_fresh(fresh_found)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
