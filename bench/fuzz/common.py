"""What every fuzz harness here shares: the checks on what a parser hands on, and the run.

Each ``fuzz_*.py`` is an atheris (libFuzzer) harness for one reader of untrusted input.  It
is not a test and not a dependency: ``pip install atheris`` in a venv of your own, then

    nice -n 10 python bench/fuzz/fuzz_trace.py bench/fuzz/corpus/trace -max_total_time=600

(libFuzzer's own options: ``-rss_limit_mb``, ``-timeout``, ``-runs``).  A harness fails
(a crash file, non-zero exit) on an exception its parser does not promise, on text that a
terminal would act on, on an input that takes more than ``-timeout`` seconds, or on memory
past ``-rss_limit_mb``.  ``python bench/fuzz/run_all.py`` runs them one after the other.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                     "\u061c\u200e\u200f\ud800-\udfff]")


def assert_safe_text(value: Any, depth: int = 0) -> None:
    """Every string in ``value`` (a JSON-like value) holds no control character but line
    breaks and tabs: nothing a terminal acts on."""
    if isinstance(value, str):
        assert not CONTROL.search(value), repr(value[:80])
    elif depth < 80 and isinstance(value, (list, tuple)):
        for v in value:
            assert_safe_text(v, depth + 1)
    elif depth < 80 and isinstance(value, dict):
        for k, v in value.items():
            assert_safe_text(k, depth + 1)
            assert_safe_text(v, depth + 1)


def argv() -> list[str]:
    """The command line for libFuzzer: its first word the command that runs this harness
    again (``FUZZ_SELF``, set by run_all.py: libFuzzer's merge runs it in a subprocess)."""
    return [os.environ.get("FUZZ_SELF", sys.argv[0]), *sys.argv[1:]]
