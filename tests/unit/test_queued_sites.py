"""A collective a framework issues later for a call the user made earlier is recorded at the
user's line that queued it (Lightning's epoch-end sync of ``self.log(..., sync_dist=True)``)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

from ddpdoctor.runtime import callsites, lightning_log


def _here() -> str:
    return callsites.sites_text(sys._getframe(0))


def test_inside_queued_at_the_users_part_is_the_queued_line() -> None:
    plain = _here()
    assert plain.startswith(__file__)
    with callsites.queued_at("/w/train.py:10"):
        queued = _here()
        assert callsites.user_site(sys._getframe(0)) == "/w/train.py:10"
    assert queued.startswith("/w/train.py:10|")
    assert _here() == plain  # restored


def test_a_metrics_key_finds_the_line_that_logged_it(monkeypatch) -> None:
    monkeypatch.setattr(lightning_log, "_sites", {"val/loss": "/w/train.py:42"})
    metric = SimpleNamespace(meta=SimpleNamespace(name="val/loss/dataloader_idx_0"))
    assert lightning_log._site_of(metric) == "/w/train.py:42"
    assert lightning_log._site_of(SimpleNamespace(meta=SimpleNamespace(name="x"))) is None
