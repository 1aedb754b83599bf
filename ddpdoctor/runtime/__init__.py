"""The part of ddpdoctor that runs inside the user's processes: activated by the bootstrap."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
from typing import Any

from ddpdoctor.runtime import recorder

ENV_DDP = "DDPDOCTOR_DDP"
_activated = False


def _note_failure(where: str, error: BaseException) -> None:
    rec = recorder.active()
    if rec is not None:
        rec.note_error(where, error)
    else:
        print(f"ddpdoctor: {where} failed ({type(error).__name__}: {error}); the job runs "
              "without diagnosis", file=sys.stderr)


def on_torch_imported() -> None:
    """Patch torch once it is fully imported: collectives, DDP, optimizer steps, spawn."""
    try:
        from ddpdoctor.runtime import patches, torch_hooks

        patches.install()
        torch_hooks.install()
    except Exception as e:  # noqa: BLE001 - never break the user's `import torch`
        _note_failure("patching torch.distributed", e)
        return
    _start_control_flow()
    _install_optional("ddpdoctor.ddp.swap", "swapping DistributedDataParallel",
                      os.environ.get(ENV_DDP, "ring"))
    _install_optional("ddpdoctor.runtime.data_probes", "installing data probes")
    _install_optional("ddpdoctor.runtime.replica_writes", "watching replicas for drift")
    _install_optional("ddpdoctor.runtime.fr_dump", "watching for flight recorder requests")
    _install_optional("ddpdoctor.runtime.lightning_log", "naming Lightning's deferred syncs")


def _start_control_flow() -> None:
    """Record the rank's path through the user's code (Python 3.12+): started as the
    user's code imports torch, so the script's own frames are on the stack; in a process
    with no trace yet (not a rank, or one not known as one yet), at its
    init_process_group instead (init_hooks.on_init): no trace is made for it here."""
    rec = recorder.existing()
    if rec is None or not rec.enabled:
        return
    try:
        from ddpdoctor.runtime import control_flow

        rec.flow = control_flow.start(rec)
    except Exception as e:  # noqa: BLE001 - no diagnosis, never a broken job
        _note_failure("recording the control flow", e)


def _install_optional(module: str, what: str, *args: Any) -> None:
    """``module.install(*args)``; a failure is noted and the job goes on without it."""
    try:
        importlib.import_module(module).install(*args)
    except ModuleNotFoundError as e:
        if e.name != module:  # the part exists but something it needs does not
            _note_failure(what, e)
    except Exception as e:  # noqa: BLE001 - optional parts never break the job
        _note_failure(what, e)


class _TorchImportHook(importlib.abc.MetaPathFinder):
    """Runs ``on_torch_imported`` right after ``import torch`` finishes, without importing
    torch in processes that never use it."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module: Any) -> None:
            original_exec(module)
            on_torch_imported()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def activate() -> None:
    """Instrument this process (called by the bootstrap when DDPDOCTOR_RUN_DIR is set)."""
    global _activated
    if _activated or not recorder.enabled_by_env():
        return
    _activated = True
    try:
        from ddpdoctor.runtime import attempt_dir

        attempt_dir.enter()
    except OSError as e:  # the attempt dir cannot be made: the base run dir is used
        _note_failure("making the attempt's run dir", e)
    from ddpdoctor.runtime import init_hooks, process_hooks

    process_hooks.install()
    try:
        init_hooks.on_process_start()
    except Exception as e:  # noqa: BLE001 - the user's program must start regardless
        _note_failure("creating the rank's trace at start", e)
    if "torch" in sys.modules:
        on_torch_imported()
    else:
        sys.meta_path.insert(0, _TorchImportHook())
