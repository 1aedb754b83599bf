"""Call sites point at the user's line and at the framework frame that made the call."""

from __future__ import annotations

import functools
import sys
import types
from typing import Callable

from ddpdoctor.analysis.model import Call
from ddpdoctor.runtime import callsites
from ddpdoctor.runtime.record_text import record_text
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import decode_text

SITE = "/usr/lib/python3.11/site-packages"


def _frames(*files: str) -> types.FrameType:
    """Run nested functions compiled under ``files`` (outermost first); return the
    innermost frame."""
    captured: list[types.FrameType] = []

    def make(i: int) -> Callable[[], None]:
        if i == len(files):
            return lambda: captured.append(sys._getframe(1))
        code = compile("def f(inner):\n    inner()\n", files[i], "exec")
        ns: dict = {}
        exec(code, ns)  # noqa: S102 - builds test frames with chosen file names
        return functools.partial(ns["f"], make(i + 1))  # no frame of its own

    make(0)()
    return captured[0]  # the innermost of the files


def test_user_called_torch_directly_has_no_framework_site() -> None:
    frame = _frames("/home/u/train.py", f"{SITE}/torch/distributed/distributed_c10d.py")
    assert callsites.sites_text(frame) == "/home/u/train.py:2|"


def test_framework_frame_is_named_with_the_user_line_above_it() -> None:
    frame = _frames("/home/u/train.py",
                    f"{SITE}/lightning/pytorch/loops/training_epoch_loop.py",
                    f"{SITE}/lightning/fabric/utilities/distributed.py",
                    f"{SITE}/torch/distributed/distributed_c10d.py")
    text = callsites.sites_text(frame)
    assert text == "/home/u/train.py:2|lightning/fabric/utilities/distributed.py:2"
    assert callsites.user_site(frame) == "/home/u/train.py:2"


def test_torch_ddp_is_a_framework_and_other_libraries_are_not_the_user() -> None:
    frame = _frames("/home/u/train.py", f"{SITE}/tqdm/std.py",
                    f"{SITE}/torch/nn/parallel/distributed.py")
    assert callsites.sites_text(frame) == \
        "/home/u/train.py:2|torch/nn/parallel/distributed.py:2"


def test_record_text_round_trips_and_keeps_sites_when_long() -> None:
    raw = record_text("4", "", "float32", "/home/u/train.py:30|lightning/x/distributed.py:247")
    assert decode_text(raw) == (((4,),), (), ("float32",), "/home/u/train.py:30",
                                "lightning/x/distributed.py:247")
    long_user = "/home/u/" + "d" * 120 + "/train.py:30"
    raw = record_text(";".join(["1024x1024"] * 8), "", "float32",
                      long_user + "|lightning/fabric/utilities/distributed.py:247")
    assert len(raw) <= L.TEXT_SIZE
    _, _, dtypes, user, fw = decode_text(raw.ljust(L.TEXT_SIZE, b"\0"))
    assert dtypes == ("float32",) and user.endswith("/train.py:30")
    assert fw in ("", "utilities/distributed.py:247")


def _call(callsite: str, framework_site: str = "") -> Call:
    return Call(0, "0", 3, "all_gather", "", ((4,),), (), ("float32",), -1, 0, callsite,
                1, 0, 0, L.RecordKind.COLLECTIVE, framework_site)


def test_where_names_framework_and_user_line() -> None:
    call = _call("/home/u/train.py:30", "lightning/fabric/utilities/distributed.py:247")
    assert call.where() == \
        "all_gather at lightning/.../distributed.py:247, called from train.py:30"
    assert _call("/home/u/train.py:30").where() == "all_gather at train.py:30"
