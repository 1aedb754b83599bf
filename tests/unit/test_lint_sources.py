"""Which functions lint walks is decided by what their code does (lint/sources.py: the calls,
attributes and environment reads a taint starts at), never by words of the source: a rank
read under a name that holds no word of "rank" is found, and a word alone walks nothing."""

from __future__ import annotations

import ast
import textwrap

from ddpdoctor.lint import sources
from ddpdoctor.lint.engine import lint_source
from ddpdoctor.lint.module import parse_source


def found(source: str) -> list[tuple[int, str, str]]:
    findings = lint_source(textwrap.dedent(source), "job.py")
    return [(f.line, f.kind, f.severity.value) for f in findings]


def function_sources(source: str, name: str) -> int:
    module = parse_source(textwrap.dedent(source), "job.py")
    node = next(n for n in module.nodes() if isinstance(n, ast.FunctionDef) and n.name == name)
    return sources.sources(module, node)


def test_a_rank_read_from_slurm_is_walked_without_a_word_of_rank():
    assert found("""
    import os
    def decide(trainer):
        if int(os.environ["SLURM_PROCID"]) == 0:
            trainer.should_stop = True
    """) == [(5, "rank_dependent_stop", "error")]


def test_an_accelerator_last_process_test_is_walked():
    assert found("""
    def decide(trainer, accelerator):
        if accelerator.is_last_process:
            trainer.should_stop = True
    """) == [(4, "rank_dependent_stop", "error")]


def test_a_global_holding_the_rank_is_a_source_of_the_functions_reading_it():
    source = """
    import torch.distributed as dist
    ME = dist.get_rank()
    def first():
        return ME == 0
    def other(x):
        # rank, is_main_process, global_zero: words, not sources
        return x + 1
    """
    assert function_sources(source, "first") & sources.RANK
    assert not function_sources(source, "other") & sources.ANY
