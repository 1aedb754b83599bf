"""Fault injection for tests: make the recorder fail where a test says, to prove it degrades."""

from __future__ import annotations

import os

ENV_TEST_FAULT = "DDPDOCTOR_TEST_FAULT"  # "where[:N][@RANK]", e.g. "begin:3@1"


class InjectedFault:
    """A fault injected by tests through DDPDOCTOR_TEST_FAULT="where[:N][@RANK]": the Nth
    call (default the first) of ``where`` on rank RANK (default any) raises RuntimeError."""

    def __init__(self, spec: str):
        where, _, rank = spec.partition("@")
        self.where, _, nth = where.partition(":")
        self.nth = int(nth) if nth.isdigit() else 1
        self.rank = int(rank) if rank.lstrip("-").isdigit() else None
        self.calls = 0

    def check(self, where: str, rank: int) -> None:
        if where != self.where or (self.rank is not None and rank != self.rank):
            return
        self.calls += 1
        if self.calls == self.nth:
            raise RuntimeError(f"injected test fault in {where} (DDPDOCTOR_TEST_FAULT)")


def injected_fault() -> InjectedFault | None:
    """The fault DDPDOCTOR_TEST_FAULT asks for, or None (always None outside tests)."""
    spec = os.environ.get(ENV_TEST_FAULT, "")
    return InjectedFault(spec) if spec else None
