"""lint on real code (tests/lint_corpus): no error on a public training script, at most one
warning in five files, every finding judged, every bug report's culprit flagged at its line.
The healthy scripts are third-party code kept outside the repository (SOURCES.md): their part
is skipped where they are not on the machine."""

from __future__ import annotations

import pytest

from tests.lint_corpus.score import BUGGY, healthy_dir, lint_corpus, load_expected


def test_bug_reports_culprits_are_flagged_at_their_line():
    judged, culprits = load_expected()
    found = {key for key, _ in lint_corpus(BUGGY, "buggy")}
    files = {p.name for p in BUGGY.glob("*.py")}
    assert files == {c.file for c in culprits}, "a bug file without a culprit (or the reverse)"
    assert len(culprits) >= 10
    missed = [c for c in culprits if not any(k[1] == c.file and k[2] == c.line for k in found)]
    assert not missed, f"culprits not flagged: {missed}"
    unjudged = found - {j.key for j in judged}
    assert not unjudged, f"findings nobody judged (add them to expected.json): {unjudged}"


def test_healthy_scripts_get_no_error_and_few_warnings():
    where = healthy_dir()
    if where is None:
        pytest.skip("the healthy corpus is not on this machine (tests/lint_corpus/SOURCES.md)")
    judged, _ = load_expected()
    pairs = lint_corpus(where, "healthy")
    errors = [f"{k[1]}:{k[2]}: {f.kind}: {f.message}" for k, f in pairs if k[4] == "error"]
    assert not errors, "errors on healthy scripts:\n" + "\n".join(errors)
    new = {k for k, _ in pairs} - {j.key for j in judged}
    assert not new, f"new findings on healthy scripts (judge them in expected.json): {new}"
    files = len(list(where.glob("*.py")))
    assert files >= 40 and len(pairs) * 5 <= files, f"{len(pairs)} warnings on {files} files"
