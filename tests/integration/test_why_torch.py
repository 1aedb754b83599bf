"""DDP's own errors and failures outside the user's code, end to end: the FIRST error finding
names the culprit rank, the user's file:line and the mechanism; no rank that only waited or
suffered a peer's failure gets an error finding."""

from __future__ import annotations

import pytest

from ddpdoctor import bugs
from tests.conftest import warm_launch
from tests.integration.sample_runs import sample_run

pytestmark = pytest.mark.slow

SAMPLE_BUGS = bugs.sample_bugs_dir()


def run_bug(tmp_path_factory, name: str):
    """The session's run of a catalogued bug (test_sample_bugs checks the same run, and
    each fixed twin's)."""
    bug = bugs.find_bug(name)
    return bug, sample_run(tmp_path_factory, bug, fixed=False)


def line_of(script: str, text: str) -> str:
    """``script:N`` of the first line of a sample bug that holds ``text``."""
    lines = (SAMPLE_BUGS / script).read_text().splitlines()
    return f"{script}:{next(i for i, line in enumerate(lines, 1) if text in line)}"


def first_error(bug: bugs.Bug, report: dict) -> dict:
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert errors, report["findings"]
    blamed = [f for f in errors if not set(f["ranks"]) <= set(bug.culprit_ranks)]
    assert blamed == [], f"an error blames a rank that only waited: {blamed}"
    assert errors[0]["ranks"] == list(bug.culprit_ranks), errors[0]
    return errors[0]


def test_a_parameter_skipped_on_one_rank_is_named_with_its_rank_and_iteration(tmp_path_factory):
    bug, run = run_bug(tmp_path_factory, "aux_loss_skipped_one_rank")
    f = first_error(bug, run.report)
    assert f["kind"] == "rank_failed"
    assert f["evidence"]["parameters"] == ["aux.weight", "aux.bias"]
    assert f["evidence"]["ranks"] == [1] and f["evidence"]["iteration"] == 3
    assert "got no gradient on rank 1 in iteration 3" in f["summary"]
    assert line_of("aux_loss_skipped_one_rank.py", "model(x, y == 2)") in f["summary"]  # the forward that raised
    assert "find_unused_parameters=True" in f["fix"] and "branch" in f["fix"]
    assert "ddpdoctor/" not in f["detail"]


def test_parameters_unused_on_every_rank_are_named(tmp_path_factory):
    bug, run = run_bug(tmp_path_factory, "unused_parameters")
    f = first_error(bug, run.report)
    assert f["evidence"]["parameters"] == ["aux_head.weight", "aux_head.bias"]
    assert f["evidence"]["iteration"] == 0
    assert line_of("unused_parameters.py", "model(x), y)") in f["summary"]
    assert f["fix"].startswith("Pass find_unused_parameters=True")


def test_a_layer_under_two_reentrant_checkpoints_is_named_with_use_reentrant_false(tmp_path_factory):
    bug, run = run_bug(tmp_path_factory, "checkpoint_reentrant_ddp")
    errors = [f for f in run.report["findings"] if f["severity"] == "error"]
    assert len(errors) == 1, errors  # one finding naming both ranks, not one per rank
    f = first_error(bug, run.report)
    assert f["kind"] == "rank_failed" and f["evidence"]["mechanism"] == "ready_twice"
    assert f["evidence"]["parameters"] == ["shared.fc.bias"]
    assert f["evidence"]["module_parameters"] == ["shared.fc.weight", "shared.fc.bias"]
    assert f["evidence"]["checkpoint"] is True and f["evidence"]["iteration"] == 0
    assert ("parameter `shared.fc.bias` (module `shared.fc`, with `shared.fc.weight`) was "
            "marked ready twice on ranks 0 and 1 in iteration 0, because the reentrant "
            "activation checkpoint (use_reentrant=True) re-ran the forward in backward") \
        in f["summary"]
    backward = line_of("checkpoint_reentrant_ddp.py", "(model(x), y).backward()")
    assert f"raised in backward at {backward}" in f["summary"]
    assert f["fix"].startswith("Use non-reentrant activation checkpointing")
    assert "use_reentrant=False" in f["fix"]
    assert "ddpdoctor/" not in f["detail"]


def test_a_reentrant_checkpoint_under_find_unused_parameters_names_that_option(doctor,
                                                                              tmp_path):
    """The sample's model with one checkpoint and find_unused_parameters=True (the option
    recorded at DDP construction): the search marked the parameters, the recompute again."""
    text = (SAMPLE_BUGS / "checkpoint_reentrant_ddp.py").read_text()
    one = "        h = checkpoint(self.shared, h, use_reentrant=True)  # the same layer again\n"
    built = "model = DDP(Encoder())"
    assert one in text and built in text
    script = tmp_path / "checkpoint_find_unused.py"
    script.write_text(text.replace(one, "").replace(
        built, "model = DDP(Encoder(), find_unused_parameters=True)"))
    run = doctor(["run", "--hang-timeout", "5", *warm_launch(2, script)], cwd=tmp_path,
                 timeout=300)
    errors = [f for f in run.report["findings"] if f["severity"] == "error"]
    assert len(errors) == 1, errors
    [f] = errors
    assert f["ranks"] == [0, 1] and f["evidence"]["find_unused_parameters"] is True
    assert f["evidence"]["module"] == "shared.fc"
    assert "find_unused_parameters=True had marked them ready as unused" in f["summary"]
    assert f["fix"].startswith("Use non-reentrant activation checkpointing")
    assert "drop find_unused_parameters=True" in f["fix"]


def test_a_model_frozen_on_one_rank_is_one_finding_on_that_rank(tmp_path_factory):
    bug, run = run_bug(tmp_path_factory, "frozen_on_one_rank")
    errors = [f for f in run.report["findings"] if f["severity"] == "error"]
    assert len(errors) == 1, errors
    f = first_error(bug, run.report)
    assert line_of("frozen_on_one_rank.py", "ddp = DDP(model)") in f["summary"]
    assert "`encoder.weight` has requires_grad=False on rank 1, True on ranks 0 and 2" \
        in f["summary"]
    assert "ddpdoctor/ddp/swap.py" not in f["detail"]


def test_a_taken_rendezvous_port_is_a_known_failure_not_the_users_code(tmp_path_factory):
    bug, run = run_bug(tmp_path_factory, "store_port_taken")
    f = first_error(bug, run.report)
    assert f["evidence"]["known_failure"] == "store_port_in_use"
    assert "pytorch/pytorch#73320" in f["evidence"]["upstream"]
    assert "known failure outside your code" in f["summary"]
    assert line_of("store_port_taken.py", "dist.init_process_group(") in f["summary"]
    assert "--rdzv-endpoint localhost:0" in f["fix"]


def test_a_rank_blocked_in_a_file_lock_is_blocked_not_computing(tmp_path_factory):
    bug, run = run_bug(tmp_path_factory, "lock_held_across_barrier")
    f = first_error(bug, run.report)
    assert f["kind"] == "missing_collective"
    at = line_of("lock_held_across_barrier.py", "fcntl.flock(lock, fcntl.LOCK_EX)  # waits")
    assert f"rank 1 is blocked in flock (a file lock held by rank 0) at {at}" in f["summary"]
    assert f["fix"].startswith("Rank 0 holds the lock rank 1 waits for")
    blocked = next(r for r in run.report["ranks"] if r["rank"] == 1)
    assert blocked["state"] == "blocked" and blocked["blocked_on"]["syscall"] == "flock"
