"""The plugin manager: built-ins through the hooks, registering and unregistering a plugin,
failures noted (never fatal), the DDPDOCTOR_PLUGINS allow-list, and the exporters."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from ddpdoctor import cli, plugins
from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.load.run_dirs import load_job
from ddpdoctor.analysis.model import Finding, Severity
from ddpdoctor.hookspecs import hookimpl
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.writer import TraceWriter

REPO = Path(__file__).resolve().parents[2]
# root causes (mismatch, missing, uneven, rank_failed, deadlock) come from analysis.causal;
# the silent-bug detectors run as plugins
CONTRACT_KINDS = {"seed_collision", "stale_shuffle", "duplicate_data", "straggler"}


# -- a real run dir, written with the trace writer the ranks use --------------------------
def write_run_dir(path: Path, world: int = 2) -> Path:
    """Two ranks' traces (collectives, ring steps, batches) in ddpdoctor's own format."""
    traces = path / "traces"
    traces.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"command": ["train.py"], "hang_timeout": 5}))
    t0 = 1_700_000_000 * 10**9
    for rank in range(world):
        w = TraceWriter(traces)
        w.set_identity(rank, world, rank)
        w.meta("group", index=0, name="0", ranks=list(range(world)), size=world, default=True)
        for seq in range(6):
            t = t0 + seq * 10**8 + rank * 10**6
            w.append(int(L.RecordKind.BATCH), L.OP_CODES["batch"], 0, 0, 0, seq, t, t, 4, -1,
                     0, 0, -1, f"|||0:{seq:016x}:{rank:016x}".encode())
            w.append(int(L.RecordKind.COLLECTIVE), L.OP_CODES["all_reduce"], 1, 2, 0, seq,
                     t + 10**6, t + 5 * 10**6, 10, -1, 0, 0, -1, b"10||float32|train.py:42")
            w.append(int(L.RecordKind.RING_STEP), L.OP_CODES["ring_send"], 0, 16, 0, 0,
                     t + 2 * 10**6, t + 3 * 10**6, 5, (rank + 1) % world, 0, 20, seq,
                     b"|||bucket 0 segment 0")
        w.set_state(L.RankState.EXITED)
        w.close()
        for suffix in (".ring", ".meta.jsonl"):  # one process wrote both: give each its pid
            os.replace(traces / f"pid-{os.getpid()}{suffix}",
                       traces / f"pid-{1000 + rank}{suffix}")
    return path


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run_dir(tmp_path / "run")


@pytest.fixture
def fresh_plugins() -> Iterator[None]:
    """Let load_plugins() run again, and undo whatever it loaded."""
    before = {name for name, _ in plugins.pm.list_name_plugin()}
    saved = (plugins._loaded, list(plugins._failures), dict(plugins._sources))
    plugins._loaded = False
    plugins._failures.clear()
    try:
        yield
    finally:
        for name, plugin in list(plugins.pm.list_name_plugin()):
            if name not in before and plugin is not None:
                plugins.pm.unregister(plugin, name)
        plugins._loaded, failures, sources = saved
        plugins._failures[:] = failures
        plugins._sources.clear()
        plugins._sources.update(sources)


# -- built-ins ---------------------------------------------------------------------------------
def test_builtin_detectors_come_through_the_hooks() -> None:
    names = [name for name, _ in plugins.registered_detectors()]
    assert CONTRACT_KINDS <= set(names)
    assert names[0] == "seed_collision"  # built-ins first
    plugins.load_plugins()
    plugins.load_plugins()  # idempotent
    assert len([n for n in names if n == "straggler"]) == 1
    assert "report" in plugins.registered_exporters()


# -- registering a plugin ------------------------------------------------------------------
class TaggingPlugin:
    """A third-party detector that finds one info finding on any job."""

    @hookimpl
    def register_detectors(self, register: Any) -> None:
        register("tagging", lambda job: [Finding("tagged", Severity.INFO, (), None, "tagged",
                                                 "", "", {})])


class RaisingDetectorPlugin:
    @hookimpl
    def register_detectors(self, register: Any) -> None:
        def boom(job: Any) -> list:
            raise ZeroDivisionError("boom in a detector")

        register("boom", boom)


class RaisingHookPlugin:
    @hookimpl
    def register_detectors(self, register: Any) -> None:
        raise RuntimeError("cannot register")


def test_a_registered_plugin_adds_its_detector_until_unregistered(run_dir: Path) -> None:
    plugin = TaggingPlugin()
    plugins.pm.register(plugin, "tagging-plugin")
    try:
        assert "tagging" in [n for n, _ in plugins.registered_detectors()]
        findings = analyze(load_job([run_dir]))
        assert "tagged" in [f.kind for f in findings]
    finally:
        plugins.pm.unregister(plugin, "tagging-plugin")
    assert "tagging" not in [n for n, _ in plugins.registered_detectors()]
    assert "tagged" not in [f.kind for f in analyze(load_job([run_dir]))]


def test_a_raising_detector_is_noted_not_fatal(run_dir: Path) -> None:
    plugin, tagging = RaisingDetectorPlugin(), TaggingPlugin()
    plugins.pm.register(plugin, "raising")
    plugins.pm.register(tagging, "tagging-plugin")
    try:
        job = load_job([run_dir])
        findings = analyze(job)
        assert "tagged" in [f.kind for f in findings]  # the others still run
        assert any("detector boom failed: ZeroDivisionError" in p for p in job.problems)
    finally:
        plugins.pm.unregister(plugin, "raising")
        plugins.pm.unregister(tagging, "tagging-plugin")


def test_a_raising_hook_loses_only_its_own_detectors(run_dir: Path) -> None:
    plugin = RaisingHookPlugin()
    plugins.pm.register(plugin, "raising-hook")
    try:
        names = [n for n, _ in plugins.registered_detectors()]
        assert CONTRACT_KINDS <= set(names) and "plugin:raising-hook" in names
        job = load_job([run_dir])
        analyze(job)
        assert any("raising-hook" in p and "cannot register" in p for p in job.problems)
    finally:
        plugins.pm.unregister(plugin, "raising-hook")


# -- entry points and the allow-list -----------------------------------------------------
@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Three 'installed' plugins (a dist-info with entry points): two good, one broken."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "dd_plugin_a.py").write_text(
        "from ddpdoctor.hookspecs import hookimpl\n"
        "@hookimpl\ndef register_detectors(register):\n"
        "    register('from_a', lambda job: [])\n")
    (site / "dd_plugin_b.py").write_text(
        "from ddpdoctor.hookspecs import hookimpl\n"
        "@hookimpl\ndef register_exporters(register):\n"
        "    register('from-b', lambda job, path: None)\n")
    (site / "dd_plugin_broken.py").write_text("raise ImportError('missing dependency x')\n")
    dist = site / "dd_plugins-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dd-plugins\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[ddpdoctor]\nplugin-a = dd_plugin_a\nplugin-b = dd_plugin_b\n"
        "plugin-broken = dd_plugin_broken\n")
    monkeypatch.syspath_prepend(str(site))
    return site


def loaded() -> set[str]:
    return {name for name, p in plugins.pm.list_name_plugin() if p is not None}


def test_entry_point_plugins_load_and_failures_are_kept(installed: Path, fresh_plugins: None,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(plugins.ENV_ALLOW, raising=False)
    names = [n for n, _ in plugins.registered_detectors()]
    assert {"plugin-a", "plugin-b"} <= loaded() and "from_a" in names
    assert "from-b" in plugins.registered_exporters()
    failures = plugins.load_failures()
    assert [(f.plugin, f.where) for f in failures] == [("plugin-broken", "load")]
    assert "missing dependency x" in failures[0].error
    assert "plugin:plugin-broken" in names  # reaches a report's problems when analysed


def test_allow_list_none_loads_no_third_party_plugin(installed: Path, fresh_plugins: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(plugins.ENV_ALLOW, "none")
    plugins.load_plugins()
    assert not loaded() & {"plugin-a", "plugin-b", "plugin-broken"}
    assert set(plugins.DEFAULT_PLUGINS) <= loaded()
    assert plugins.load_failures() == []


def test_allow_list_names_the_plugins_to_load(installed: Path, fresh_plugins: None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(plugins.ENV_ALLOW, "plugin-b")
    plugins.load_plugins()
    assert "plugin-b" in loaded() and not loaded() & {"plugin-a", "plugin-broken"}
    monkeypatch.setenv(plugins.ENV_ALLOW, "dd-plugins")  # a distribution name works too
    plugins._loaded = False
    plugins.load_plugins()
    assert {"plugin-a", "plugin-b"} <= loaded()


def test_plugins_command_lists_plugins_and_failures(installed: Path, fresh_plugins: None,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture) -> None:
    monkeypatch.delenv(plugins.ENV_ALLOW, raising=False)
    assert cli.main(["plugins", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in out["plugins"]}
    assert "straggler" in rows["ddpdoctor.analysis.detectors"]["detectors"]
    assert rows["plugin-a"]["detectors"] == ["from_a"]
    assert rows["plugin-a"]["source"] == "dd-plugins 1.0"
    assert out["failures"][0]["plugin"] == "plugin-broken"
    assert cli.main(["plugins"]) == 1  # the table, with the failure: non-zero
    assert "plugin-broken" in capsys.readouterr().out


# -- exporters -------------------------------------------------------------------------------
@pytest.fixture
def chrome_plugin() -> Iterator[Any]:
    sys.path.insert(0, str(REPO / "plugins" / "ddpdoctor-chrome-trace" / "src"))
    try:
        import ddpdoctor_chrome_trace
    finally:
        sys.path.pop(0)
    registered = plugins.pm.get_plugin("chrome-trace") is None
    if registered:
        plugins.pm.register(ddpdoctor_chrome_trace, "chrome-trace")
    try:
        yield ddpdoctor_chrome_trace
    finally:
        if registered:
            plugins.pm.unregister(ddpdoctor_chrome_trace, "chrome-trace")


def test_export_chrome_trace_of_a_run_dir(run_dir: Path, chrome_plugin: Any,
                                          tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    assert cli.main(["export", "--format", "chrome-trace", str(run_dir), "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    tracks = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(tracks) == [0, 1] and tracks[1].startswith("rank 1 (pid ")
    slices = [e for e in events if e["ph"] == "X"]
    colls = [e for e in slices if e["cat"] == "collective"]
    assert {e["pid"] for e in colls} == {0, 1} and len(colls) == 12
    first = min((e for e in colls if e["pid"] == 1), key=lambda e: e["ts"])
    assert first["args"] == {"seq": 0, "op": "all_reduce", "group": "0", "shapes": [[10]],
                             "dtypes": ["float32"], "reduce_op": "sum",
                             "callsite": "train.py:42", "open": False}
    assert first["dur"] == 4000.0 and first["ts"] >= 0
    ring = [e for e in slices if e["cat"] == "ring"]
    assert len(ring) == 12 and ring[0]["args"]["bytes"] == 20
    assert all(e["dur"] >= 0 for e in slices)


def test_export_default_path_and_unknown_format(run_dir: Path, chrome_plugin: Any,
                                                capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["export", "--format", "chrome-trace", str(run_dir)]) == 0
    assert json.loads((run_dir / "trace.chrome.json").read_text())["traceEvents"]
    assert cli.main(["export", "--format", "nope", str(run_dir)]) == 2
    assert "no exporter for format 'nope'" in capsys.readouterr().err


def test_export_report_is_builtin(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert cli.main(["export", "--format", "report", str(run_dir), "-o", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["schema"] == "ddpdoctor.report/1" and len(report["ranks"]) == 2


def test_the_example_detector_plugin(run_dir: Path) -> None:
    sys.path.insert(0, str(REPO / "plugins" / "ddpdoctor-example-detector" / "src"))
    try:
        import ddpdoctor_example_detector as example
    finally:
        sys.path.pop(0)
    installed = plugins.pm.get_plugin("example-detector") is not None  # pip-installed
    if not installed:
        plugins.pm.register(example, "example-detector")
    try:
        assert "barrier_heavy" in [n for n, _ in plugins.registered_detectors()]
        assert "barrier_heavy" not in [f.kind for f in analyze(load_job([run_dir]))]
    finally:
        if not installed:
            plugins.pm.unregister(example, "example-detector")
