"""The classes of the causal model in other shapes (tests/integration/shapes.py): the same
scripts at another world size.  The first error names the shape's culprits and no rank that
only waited; its `Fix:` line follows its cause; a slow, healthy shape runs to its end.  (The
twins at those sizes run in ``python -m tests.stability``, which runs each shape five
times.)"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ddpdoctor import bugs
from tests.integration.sample_runs import sample_run
from tests.integration.shapes import SHAPES, shape_bug
from tests.integration.test_sample_bugs import check_root_cause_first, describe
from tests.integration.test_why import line_of

pytestmark = pytest.mark.slow
EACH = pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)


@EACH
def test_shape_names_its_culprits_first(tmp_path_factory, shape):
    bug = shape_bug(shape)
    run = sample_run(tmp_path_factory, bug, fixed=False)
    report = run.report
    assert report["world_size"] == shape.nproc
    findings = report["findings"]
    if shape.ends == "finishes":
        assert run.returncode == 0, f"{bug.name}: stopped\n{run.stderr[-3000:]}"
        assert not [f for f in findings if f["severity"] == "error"], describe(findings)
    named = [f for f in findings if f["kind"] == bug.finding_kind]
    if not (shape.ends == "finishes" and bug.finding_kind == "straggler"):  # (may be said)
        assert named, f"{bug.name}: no {bug.finding_kind}: {describe(findings)}"
    for f in named[:1]:
        assert sorted(f["ranks"]) == sorted(shape.culprits), (
            f"{bug.name}: {bug.finding_kind} on {list(shape.culprits)}: {describe(findings)}")
    if shape.ends != "finishes":
        check_root_cause_first(bug, findings)


@dataclass(frozen=True)
class Told:
    """What the first error (``warning`` for a silent bug) of ``name`` (a catalogue bug or a
    shape) must say: the line holding ``marker`` as script:line with its source, and
    ``words`` about the mechanism and the fix."""

    name: str
    marker: str
    words: tuple[str, ...]
    severity: str = "error"


TOLD = (
    Told("all_to_all_split_own_data", "dist.all_to_all_single(out, x,",
         ("split sizes", "rank 0 changed its own split sizes", "Exchange the split sizes")),
    Told("all_to_all_split_own_data_4ranks", "dist.all_to_all_single(out, x,",
         ("split sizes", "rank 0 sent [6, 0, 0, 2] rows", "Exchange the split sizes")),
    Told("dtensor_full_tensor_rank0", 'print(f"weight norm {weight.full_tensor()',
         ("all_gather_into_tensor", "`if rank == 0 and step == 2:`", "every rank")),
    Told("fsdp2_eval_rank0", "score = model(torch.randn(2, 8, generator=g))",
         ("went out of step", "`if rank == 0 and step == 1:`", "every rank")),
    Told("lightning_log_sync_dist_rank0", 'self.log("grad_norm"',
         ("`if self.global_rank == 0:`", "framework helper", "every rank")),
    Told("frozen_on_one_rank_2ranks", "requires_grad_(False)",
         ("requires_grad=False on rank 1, True on rank 0", "Build the same model")),
    Told("time_budget_exit_4ranks", "            break",
         ("left the loop alone", "decided by its own clock", "Decide together")),
    Told("sampler_seed_per_rank_4ranks", "sampler = DistributedSampler(",
         ("seed their DistributedSampler differently", "same seed"), "warning"),
)


def _bug_named(name: str) -> bugs.Bug:
    shape = next((s for s in SHAPES if s.name == name), None)
    return shape_bug(shape) if shape is not None else bugs.find_bug(name)


@pytest.mark.parametrize("told", TOLD, ids=lambda t: t.name)
def test_first_finding_says_the_line_and_the_mechanism(tmp_path_factory, told: Told):
    bug = _bug_named(told.name)
    run = sample_run(tmp_path_factory, bug, fixed=False)
    first = next((f for f in run.report["findings"] if f["severity"] == told.severity), None)
    assert first is not None, f"{told.name}: no {told.severity}: {describe(run.report['findings'])}"
    assert sorted(first["ranks"]) == sorted(bug.culprit_ranks), describe([first])
    text = "\n".join((first["summary"], first["detail"], first["fix"]))
    want = f"{bug.script}:{line_of(bug.script, told.marker)}"
    assert want in text, f"{told.name}: {want} not in {text}"
    for words in told.words:
        assert words in text, f"{told.name}: {words!r} not in {text}"
