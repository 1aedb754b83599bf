"""Lightning's deferred metric syncs named at the user's ``self.log`` line.

``self.log(key, value, on_epoch=True, sync_dist=True)`` in a step only stores the value; at
the end of the epoch Lightning's result collection reduces it across ranks
(``_ResultMetric.compute`` -> ``strategy.reduce``: a barrier and an all_reduce) from inside
``trainer.fit``.  A ``self.log`` under a rank test then shows as a collective "at
trainer.fit" on both ranks.  Here ``LightningModule.log`` remembers the user's line for each
key on this rank, and the reduce of that key runs inside ``callsites.queued_at(line)``: its
collectives are recorded at the ``self.log`` line (whose source quotes the key).  Installed
when Lightning's result module is imported; a failure switches it off, never the job.
"""

from __future__ import annotations

import functools
from typing import Any

from ddpdoctor.frameworks import lightning
from ddpdoctor.runtime import callsites
from ddpdoctor.runtime import recorder as R
from ddpdoctor.runtime.import_hooks import after_import

RESULT_MODULES = lightning.RESULT_MODULES
MODULE_MODULES = lightning.MODULE_MODULES
MAX_KEYS = 4096  # keys remembered per process, at most
_sites: dict[str, str] = {}  # logged key -> the user's line that logged it last
_on = {"log": True}


def _off(where: str, error: BaseException) -> None:
    _on["log"] = False
    rec = R.existing()
    if rec is not None:
        rec.note_error(f"Lightning's {where}", error)


def _patch_log(module: Any) -> None:
    cls = getattr(module, "LightningModule", None)
    original = getattr(cls, "log", None)
    if original is None or getattr(original, "__ddpdoctor_original__", None):
        return

    @functools.wraps(original)
    def log(self: Any, name: Any, *args: Any, **kwargs: Any) -> Any:
        if _on["log"]:
            try:
                if len(_sites) < MAX_KEYS or name in _sites:
                    _sites[str(name)] = R.user_callsite(2)
            except Exception as e:  # noqa: BLE001 - never into the user's step
                _off("self.log hook", e)
        return original(self, name, *args, **kwargs)

    log.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls.log = log


def _site_of(metric: Any) -> str | None:
    name = str(getattr(getattr(metric, "meta", None), "name", ""))
    site = _sites.get(name)
    if site is None and lightning.DATALOADER_SUFFIX in name:
        site = _sites.get(name.rsplit(lightning.DATALOADER_SUFFIX, 1)[0])
    return site


def _patch_compute(module: Any) -> None:
    cls = getattr(module, "_ResultMetric", None)
    original = getattr(cls, "compute", None)
    if original is None or getattr(original, "__ddpdoctor_original__", None):
        return

    @functools.wraps(original)
    def compute(self: Any, *args: Any, **kwargs: Any) -> Any:
        site = None
        if _on["log"] and _sites:
            try:
                site = _site_of(self)
            except Exception as e:  # noqa: BLE001
                _off("metric sync hook", e)
        if site is None:
            return original(self, *args, **kwargs)
        with callsites.queued_at(site):
            return original(self, *args, **kwargs)

    compute.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls.compute = compute


def _guarded(patch: Any) -> Any:
    def run(module: Any) -> None:
        try:
            patch(module)
        except Exception as e:  # noqa: BLE001 - Lightning runs as it is then
            _off("hooks", e)
    return run


def install() -> None:
    """Hook Lightning's self.log and its epoch-end metric sync when they are imported."""
    for name in MODULE_MODULES:
        after_import(name, _guarded(_patch_log))
    for name in RESULT_MODULES:
        after_import(name, _guarded(_patch_compute))
