"""The bug catalogue's integrity: every entry has its scripts, names are unique, lookups fail well."""

from __future__ import annotations

import ast
import io
import sys

import pytest
from rich.console import Console

from ddpdoctor import bugs
from ddpdoctor.errors import UserError

SAMPLE_BUGS = bugs.sample_bugs_dir()
# the process-group timeout is the bug itself here: shorter than the slow rank's evaluation
SHORT_PG_TIMEOUT = {"pg_timeout_while_peer_computes": "timeout=datetime.timedelta(seconds=4)"}
CAUSAL_SHAPES = ("clean_exit_uneven_no_loader", "pg_timeout_while_peer_computes",
                 "subgroup_skip_4ranks", "two_group_lock_order", "p2p_recv_recv",
                 "stuck_before_init", "busy_straggler_finishes")
ENTRIES = pytest.mark.parametrize("bug", bugs.CATALOGUE, ids=lambda b: b.name)


def test_catalogue_has_at_least_twelve_bugs_with_unique_names():
    names = [b.name for b in bugs.CATALOGUE]
    assert len(names) >= 12
    assert len(set(names)) == len(names)


def test_catalogue_covers_every_launch_form():
    assert {b.launch for b in bugs.CATALOGUE} == set(bugs.Launch)


def test_catalogue_has_multi_rank_blame():
    assert any(b.nproc >= 3 for b in bugs.CATALOGUE)


@ENTRIES
def test_scripts_exist_and_are_named_after_the_bug(bug):
    assert bug.script == f"{bug.name}.py"
    assert bug.fixed_script == f"{bug.name}_fixed.py"
    assert (SAMPLE_BUGS / bug.script).is_file()
    assert (SAMPLE_BUGS / bug.fixed_script).is_file()


@ENTRIES
def test_scripts_follow_the_conventions(bug):
    for script in (bug.script, bug.fixed_script):
        source = (SAMPLE_BUGS / script).read_text()
        assert source.startswith("#!/usr/bin/env python\n"), script
        assert ast.get_docstring(ast.parse(source)), script
        assert "torch.set_num_threads(1)" in source, script
        assert 'init_process_group("gloo"' in source, script
        timeout = "timeout=datetime.timedelta(seconds=120)"
        if script == bug.script:
            timeout = SHORT_PG_TIMEOUT.get(bug.name, timeout)
        assert timeout in source, script
        if bug.launch == bugs.Launch.SPAWN:
            assert "mp.spawn(" in source and "MASTER_ADDR" in source, script
        else:
            assert 'os.environ["RANK"]' in source, script


@ENTRIES
def test_entry_is_complete(bug):
    assert bug.finding_kind in bugs.FINDING_KINDS
    assert bug.culprit_ranks and all(0 <= r < bug.nproc for r in bug.culprit_ranks)
    assert bug.symptom and bug.source and bug.fix
    assert bug.hang_timeout > 0


def test_catalogue_holds_every_shape_of_the_causal_model():
    by_name = {b.name: b for b in bugs.CATALOGUE}
    assert set(CAUSAL_SHAPES) <= set(by_name)
    for name in CAUSAL_SHAPES:
        assert by_name[name].hang_timeout <= 5.0, name  # detected within a short timeout
    assert by_name["subgroup_skip_4ranks"].nproc == 4
    assert by_name["subgroup_skip_4ranks"].culprit_ranks == (1,)  # rank 0 only waits
    deadlocks = [b for b in bugs.CATALOGUE if b.finding_kind == "deadlock"]
    assert {b.name for b in deadlocks} == {"two_group_lock_order", "p2p_recv_recv"}
    assert all(len(b.culprit_ranks) == b.nproc for b in deadlocks)  # a cycle names all


def test_only_the_busy_straggler_is_expected_to_finish():
    assert [b.name for b in bugs.CATALOGUE if b.finishes] == ["busy_straggler_finishes"]
    straggler = bugs.find_bug("busy_straggler_finishes")
    assert straggler.finding_kind == "straggler" and straggler.culprit_ranks == (1,)


def test_finding_kinds_are_the_contracts():
    assert "deadlock" in bugs.FINDING_KINDS and "replica_divergence" in bugs.FINDING_KINDS
    assert len(set(bugs.FINDING_KINDS)) == 10


def test_every_bug_has_a_readme_row():
    readme = (SAMPLE_BUGS / "README.md").read_text()
    for bug in bugs.CATALOGUE:
        assert f"`{bug.name}`" in readme, bug.name


def test_no_stray_scripts_in_sample_bugs():
    listed = {s for b in bugs.CATALOGUE for s in (b.script, b.fixed_script)}
    assert {p.name for p in SAMPLE_BUGS.glob("*.py")} == listed


def test_find_bug_returns_the_entry():
    bug = bugs.CATALOGUE[0]
    assert bugs.find_bug(bug.name) is bug


def test_find_bug_names_close_matches_for_a_typo():
    with pytest.raises(UserError) as err:
        bugs.find_bug("no_set_epock")
    message = str(err.value)
    assert "no_set_epoch" in message and "\n" not in message
    assert "ddpdoctor bugs list" in message


def test_find_bug_for_a_partial_name_lists_candidates():
    with pytest.raises(UserError) as err:
        bugs.find_bug("last_batch")
    assert "last_batch_hand_split" in str(err.value)
    assert "last_batch_iterable_dataset" in str(err.value)


def test_find_bug_unknown_name_without_close_matches():
    with pytest.raises(UserError, match="no bug named 'zzz'"):
        bugs.find_bug("zzz")


def test_bug_rejects_an_unknown_finding_kind():
    with pytest.raises(ValueError, match="finding kind"):
        bugs.Bug("x", "x.py", "x_fixed.py", 2, bugs.Launch.SCRIPT, "s", "no_such_kind", (0,),
                 "src", "fix")


def test_bug_rejects_culprits_outside_the_world():
    with pytest.raises(ValueError, match="culprit"):
        bugs.Bug("x", "x.py", "x_fixed.py", 2, bugs.Launch.SCRIPT, "s", "rank_failed", (2,),
                 "src", "fix")


def test_missing_sample_bugs_dir_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setenv(bugs.ENV_SAMPLE_BUGS, str(tmp_path))
    with pytest.raises(UserError, match=bugs.ENV_SAMPLE_BUGS):
        bugs.sample_bugs_dir()


def test_env_var_points_at_another_sample_bugs_dir(monkeypatch):
    monkeypatch.setenv(bugs.ENV_SAMPLE_BUGS, str(SAMPLE_BUGS))
    assert bugs.sample_bugs_dir() == SAMPLE_BUGS


@pytest.mark.parametrize("launch,expected", [
    (bugs.Launch.SCRIPT, ["--nproc-per-node", "3", "b.py"]),
    (bugs.Launch.SPAWN, ["--", sys.executable, "b.py"]),
])
def test_job_command_per_launch_form(launch, expected):
    bug = bugs.Bug("b", "b.py", "b_fixed.py", 3, launch, "s", "rank_failed", (0,), "src", "fix")
    assert bugs.job_command(bug, fixed=False) == expected


def test_torchrun_form_and_fixed_twin():
    bug = bugs.Bug("b", "b.py", "b_fixed.py", 2, bugs.Launch.TORCHRUN, "s", "rank_failed", (0,),
                   "src", "fix")
    cmd = bugs.job_command(bug, fixed=True)
    assert cmd[0] == "--" and cmd[-3:] == ["--nproc-per-node", "2", "b_fixed.py"]


def test_run_command_puts_options_before_the_job():
    bug = bugs.find_bug("no_set_epoch")
    cmd = bugs.run_command(bug, False, ["--ddp", "torch"], None)
    assert cmd[:6] == [sys.executable, "-m", "ddpdoctor.cli", "run", "--hang-timeout",
                       str(bug.hang_timeout)]
    assert cmd[6:] == ["--ddp", "torch", "--nproc-per-node", "2", "no_set_epoch.py"]


def test_run_bug_runs_in_sample_bugs_with_a_run_dir_in_the_cwd(tmp_path, monkeypatch):
    calls = []

    class Done:
        def __init__(self, cmd, cwd):
            calls.append((cmd, cwd))

        def wait(self):
            return 124

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bugs.subprocess, "Popen", Done)
    assert bugs.run_bug("crash_mid_epoch", False, []) == 124
    [(cmd, cwd)] = calls
    assert cwd == SAMPLE_BUGS
    run_dir = cmd[cmd.index("--run-dir") + 1]
    assert run_dir.startswith(str(tmp_path / "ddpdoctor-runs"))
    assert cmd[-1] == "crash_mid_epoch.py"


def test_run_bug_keeps_the_users_run_dir(monkeypatch):
    calls = []

    class Done:
        def __init__(self, cmd, cwd):
            calls.append(cmd)

        def wait(self):
            return 0

    monkeypatch.setattr(bugs.subprocess, "Popen", Done)
    assert bugs.run_bug("crash_mid_epoch", True, ["--run-dir", "/x"]) == 0
    assert calls[0].count("--run-dir") == 1
    assert calls[0][-1] == "crash_mid_epoch_fixed.py"


def test_list_bugs_prints_every_bug():
    out = io.StringIO()
    assert bugs.list_bugs(Console(file=out, width=200)) == 0
    text = out.getvalue()
    for bug in bugs.CATALOGUE:
        assert bug.name in text and bug.finding_kind in text
