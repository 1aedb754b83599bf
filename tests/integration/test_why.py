"""Why, not only who: real jobs whose first error finding names the culprit, the line where
the ranks went out of step (not where it surfaced) and the mechanism, in words."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ddpdoctor import bugs
from tests.integration.sample_runs import sample_run
from tests.integration.test_sample_bugs import check_root_cause_first, describe

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Why:
    """What the first error finding must say about one sample bug.

    marker: text of the line where the ranks went out of step (its line in the script is
    looked up, so the test does not hard-code a number); evidence: the evidence key that
    holds that place; words: what the finding must say about the mechanism and the fix."""

    bug: str
    marker: str
    evidence: str
    words: tuple[str, ...]


CASES = (
    Why("loss_log_extra_allreduce_rank0", "dist.all_reduce(val)", "out_of_step",
        ("went out of step", "inside `if rank == 0:`", "which rank 1 never called",
         "surfaced at seq")),
    Why("eval_ddp_forward_rank0", "acc = (model(val_x)", "out_of_step",
        ("DDP's forward", "broadcasts the module's buffers", "`model.module`")),
    Why("nan_loss_skip_one_rank", "continue  # BUG", "skipped_iteration",
        ("skipped iteration", "`if not torch.isfinite(loss):`", "its own data",
         "all-reduce the flag")),
)


def line_of(script: str, marker: str) -> int:
    text = (bugs.sample_bugs_dir() / script).read_text().splitlines()
    [line] = [i + 1 for i, t in enumerate(text) if marker in t]
    return line


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.bug)
def test_first_error_says_where_the_ranks_went_out_of_step_and_why(tmp_path_factory,
                                                                    case: Why):
    bug = bugs.find_bug(case.bug)
    run = sample_run(tmp_path_factory, bug, fixed=False)
    findings = run.report["findings"]
    check_root_cause_first(bug, findings)
    first = [f for f in findings if f["severity"] == "error"][0]
    place = first["evidence"].get(case.evidence)
    assert place, f"{bug.name}: no {case.evidence} in {describe([first])}"
    want = f"{bug.script}:{line_of(bug.script, case.marker)}"
    assert place["callsite"].endswith("/" + want), (bug.name, place, want)
    assert case.marker.split("  #")[0] in place["source"], place
    text = " ".join((first["summary"], first["detail"], first["fix"]))
    for words in case.words:
        assert words in text, f"{bug.name}: {words!r} not in {text}"
    assert sorted(place.get("ranks") or place.get("rank")) == sorted(bug.culprit_ranks)
